// Package simcli is the simulator's command line: serving llmsim and
// running `llmsim load` against it. Both cmd/llmsim (the simulator on its
// own) and `ragtime llmsim` run it, each with its own flag handling.
package simcli

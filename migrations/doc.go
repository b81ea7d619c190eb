// Package migrations holds ragtime's database schema as plain, numbered SQL
// files with goose annotations, embedded in the binary as FS.
//
// The postgres package applies them (ragtime migrate, and serve at start);
// add a new NNNN_name.sql file for every change and never edit an applied one.
package migrations

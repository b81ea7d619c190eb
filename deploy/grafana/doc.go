// Package grafana holds ragtime's provisioned Grafana data source and
// dashboard (deploy/grafana/provisioning and dashboards/ragtime.json).
//
// It has no code: its test loads the dashboard and runs every panel's SQL,
// with Grafana's macros substituted, against the real schema with data in it.
package grafana

// Package grafana holds ragtime's provisioned Grafana data source and
// dashboard (deploy/grafana/provisioning and dashboards/ragtime.json).
//
// It has no code: its test loads the dashboard and runs every panel's SQL,
// with Grafana's macros and the provider and model variables substituted,
// against the real schema with data in it. The dashboard JSON is written by
// deploy/grafana/gen, a module of its own built on the Grafana Foundation
// SDK.
package grafana

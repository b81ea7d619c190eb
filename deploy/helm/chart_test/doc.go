// Package chart_test renders the Helm chart in ../ragtime with Helm's own Go
// packages (offline: loader, chartutil, engine) and decodes every object
// strictly into the Kubernetes API types. It is its own Go module so that
// helm and k8s.io never enter ragtime's build; `make test` runs it.
package chart_test

package api

import (
	"embed"
	"io/fs"
	"net/http"
	"strconv"
	"strings"

	"github.com/google/uuid"
	"github.com/labstack/echo/v4"

	"ragtime/pipeline"
)

// web holds ragtime's own pages: hand-written HTML, CSS, JavaScript and
// SVG, with no build step and nothing fetched from elsewhere.
//
//go:embed web
var web embed.FS

// webFS is web's "web" folder at the root.
var webFS, _ = fs.Sub(web, "web")

// page serves one embedded HTML page; the page's script reads what it
// needs from the JSON API.
func (s *server) page(name string) echo.HandlerFunc {
	return func(c echo.Context) error {
		return servePage(c, name, http.StatusOK)
	}
}

// queryPage serves /queries/:id. An id that is not a UUID names no query:
// the page comes with 404 (its script says "no query with id ..."). A UUID
// is looked up by the script, with the caller's key: the page itself tells
// nobody whether a query exists.
func (s *server) queryPage(c echo.Context) error {
	status := http.StatusOK
	if _, err := uuid.Parse(c.Param("id")); err != nil {
		status = http.StatusNotFound
	}
	return servePage(c, "query.html", status)
}

// pageLimits fills in the server's limits where a page's form names them
// (the top_k inputs' max="{{MaxTopK}}", which the ask page's script reads too), so the
// pages check what the server checks without a copy of its numbers.
var pageLimits = strings.NewReplacer(`{{MaxTopK}}`, strconv.Itoa(pipeline.MaxTopK))

// servePage writes the embedded page name with status.
func servePage(c echo.Context, name string, status int) error {
	raw, err := fs.ReadFile(webFS, name)
	if err != nil {
		return err
	}
	b := []byte(pageLimits.Replace(string(raw)))
	c.Response().Header().Set("Cache-Control", "no-cache")
	c.Response().Header().Set("Content-Security-Policy", pageCSP)
	return c.HTMLBlob(status, b)
}

// handleStatic serves the pages' scripts and style sheet under /static/.
func (s *server) handleStatic(c echo.Context) error {
	name := c.Param("*")
	if name == "" || !fs.ValidPath(name) {
		return echo.ErrNotFound
	}
	if _, err := fs.Stat(webFS, name); err != nil {
		return echo.ErrNotFound
	}
	c.Response().Header().Set("Cache-Control", "no-cache")
	http.ServeFileFS(c.Response(), c.Request(), webFS, name)
	return nil
}

// handleClientJS serves /client.js, ragtime's browser client: an ES
// module any page may import, from this server or (with CORS: module
// scripts are fetched in cors mode) from another site; it holds no secret.
func (s *server) handleClientJS(c echo.Context) error {
	b, err := fs.ReadFile(webFS, "client.js")
	if err != nil {
		return err
	}
	h := c.Response().Header()
	h.Set("Cache-Control", "no-cache")
	h.Set("Access-Control-Allow-Origin", "*")
	return c.Blob(http.StatusOK, "text/javascript; charset=utf-8", b)
}

// handleMetrics serves Prometheus metrics when they are configured.
func (s *server) handleMetrics(c echo.Context) error {
	if s.deps.Metrics == nil {
		return echo.ErrNotFound
	}
	s.deps.Metrics.ServeHTTP(c.Response(), c.Request())
	return nil
}

package api

import (
	"github.com/labstack/echo/v4"

	"ragtime/auth"
)

// routes is the one place that lists every endpoint and the scope a key
// needs for it. The pages, their files and the health checks are public
// (the pages read everything through the API).
func (s *server) routes(e *echo.Echo) {
	ask, read, docs, metrics := s.need(auth.ScopeAsk), s.need(auth.ScopeRead), s.need(auth.ScopeDocuments), s.need(auth.ScopeMetrics)
	e.GET("/", s.page("ask.html"))
	e.GET("/queries", s.page("queries.html"))
	e.GET("/queries/:id", s.queryPage)
	e.GET("/dashboard", s.page("dashboard.html"))
	e.GET("/static/*", s.handleStatic)
	e.GET("/client.js", s.handleClientJS)
	e.GET("/healthz", s.handleHealthz)
	e.GET("/readyz", s.handleReadyz)
	e.GET("/ask", s.handleAskGet, ask)
	e.POST("/ask", s.handleAskPost, ask)
	e.POST("/v1/chat/completions", s.handleChatCompletions, ask)
	e.POST("/v1/search", s.handleSearch, ask)
	e.GET("/v1/models", s.handleModels, ask)
	e.GET("/v1/models/*", s.handleModel, ask)
	e.GET("/v1/queries", s.handleListQueries, read)
	e.GET("/v1/queries/:id", s.handleGetQuery, read)
	e.GET("/v1/documents", s.handleListDocuments, docs)
	e.POST("/v1/documents", s.handlePutDocuments, docs)
	e.DELETE("/v1/documents/:id", s.handleDeleteDocument, docs)
	e.GET("/v1/stats", s.handleStats, read)
	e.GET("/v1/stats/models", s.handleStatsModels, read)
	e.GET("/metrics", s.handleMetrics, metrics)
}

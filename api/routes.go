package api

import "github.com/labstack/echo/v4"

// routes is the one place that lists every endpoint.
func (s *server) routes(e *echo.Echo) {
	e.GET("/", s.page("ask.html"))
	e.GET("/queries", s.page("queries.html"))
	e.GET("/queries/:id", s.page("query.html"))
	e.GET("/dashboard", s.page("dashboard.html"))
	e.GET("/static/*", s.handleStatic)
	e.GET("/healthz", s.handleHealthz)
	e.GET("/readyz", s.handleReadyz)
	e.GET("/ask", s.handleAskGet)
	e.POST("/ask", s.handleAskPost)
	e.GET("/v1/queries", s.handleListQueries)
	e.GET("/v1/queries/:id", s.handleGetQuery)
	e.GET("/v1/documents", s.handleListDocuments)
	e.POST("/v1/documents", s.handlePutDocuments)
	e.DELETE("/v1/documents/:id", s.handleDeleteDocument)
	e.GET("/v1/stats", s.handleStats)
	e.GET("/metrics", s.handleMetrics)
}

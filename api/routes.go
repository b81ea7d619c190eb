package api

import "github.com/labstack/echo/v4"

// routes is the one place that lists every endpoint.
func (s *server) routes(e *echo.Echo) {
	e.GET("/", s.handleIndex)
	e.GET("/healthz", s.handleHealthz)
	e.GET("/readyz", s.handleReadyz)
	e.GET("/ask", s.handleAskGet)
	e.POST("/ask", s.handleAskPost)
	e.GET("/v1/queries/:id", s.handleGetQuery)
	e.GET("/v1/documents", s.handleListDocuments)
	e.POST("/v1/documents", s.handlePutDocuments)
	e.DELETE("/v1/documents/:id", s.handleDeleteDocument)
}

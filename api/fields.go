package api

import (
	"errors"

	"ragtime/pipeline"
)

// renameField answers a validation error under the name the caller used
// for the field (a GET parameter rather than the JSON field).
func renameField(err error, field string) error {
	var ve *pipeline.ValidationError
	if errors.As(err, &ve) {
		return badRequest(field, ve.Code, ve.Message)
	}
	return err
}

// nameOf is how an error names a parameter or field the caller sent:
// itself, or "(empty)" for a name that is the empty string (?=x, {"": 1}),
// so the error still names something.
func nameOf(name string) string {
	if name == "" {
		return "(empty)"
	}
	return name
}

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

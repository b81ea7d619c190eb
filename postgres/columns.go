package postgres

import (
	"fmt"
	"math"
	"reflect"
	"slices"
	"strings"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgtype"

	"ragtime/pipeline"
)

// column is one column of the queries table, bound to the pipeline.Record
// field it stores. The list is derived from Record's db tags (see its doc),
// so the insert, the select and the checks before writing are written once.
type column struct {
	name  string
	index []int // reflect field index in pipeline.Record
	// null stores the field's zero value as NULL and reads NULL as zero.
	null bool
	// uuid: the field is a string holding a UUID, in a uuid column.
	uuid bool
	typ  reflect.Type
}

// queryColumns are the queries table's columns, in Record's field order.
var queryColumns = recordColumns(reflect.TypeFor[pipeline.Record](), nil)

// idColumn is the position of the id column in queryColumns.
var idColumn = slices.IndexFunc(queryColumns, func(c column) bool { return c.name == "id" })

// recordColumns walks t's fields: a field tagged db:"name[,null][,uuid]"
// is a column, db:"-" is not stored in queries, and an untagged struct
// field (Figures, Usage) contributes its own fields.
func recordColumns(t reflect.Type, prefix []int) []column {
	var cols []column
	for i := range t.NumField() {
		f := t.Field(i)
		index := append(append([]int(nil), prefix...), i)
		tag, tagged := f.Tag.Lookup("db")
		if tag == "-" || !f.IsExported() {
			continue
		}
		if !tagged {
			if f.Type.Kind() == reflect.Struct {
				cols = append(cols, recordColumns(f.Type, index)...)
				continue
			}
			// A field without a db tag is stored under its JSON name.
			tag, _, _ = strings.Cut(f.Tag.Get("json"), ",")
		}
		name, opts, _ := strings.Cut(tag, ",")
		c := column{name: name, index: index, typ: f.Type}
		for _, o := range strings.Split(opts, ",") {
			switch o {
			case "null":
				c.null = true
			case "uuid":
				c.uuid = true
			}
		}
		cols = append(cols, c)
	}
	return cols
}

// selectQuery reads one query row by id, in queryColumns' order, in the
// created_at range [$2, $3) (the partitions the id's time points at; see
// idWindow), or anywhere with selectQueryAnywhere.
var selectQuery = selectQueryAnywhere + " AND created_at >= $2 AND created_at < $3"

// selectQueryAnywhere reads one query row by id from every partition.
var selectQueryAnywhere = func() string {
	exprs := make([]string, len(queryColumns))
	for i, c := range queryColumns {
		exprs[i] = c.name
		if c.uuid {
			exprs[i] = c.name + "::text"
		}
	}
	return "SELECT " + strings.Join(exprs, ", ") + " FROM queries WHERE id = $1"
}()

// queryValues returns rec's values in queryColumns' order (for writeRows), checking what
// PostgreSQL could not be asked to check (a UUID is one, an integer fits an
// int4 column). Its errors wrap errInvalidRecord.
func queryValues(rec *pipeline.Record) ([]any, error) {
	rv := reflect.ValueOf(rec).Elem()
	vals := make([]any, len(queryColumns))
	for i, c := range queryColumns {
		v := rv.FieldByIndex(c.index)
		if c.null && v.IsZero() {
			continue // NULL
		}
		switch {
		case c.uuid:
			id, err := uuid.Parse(v.String())
			if err != nil {
				return nil, fmt.Errorf("%w: %s %.80q is not a UUID", errInvalidRecord, c.name, v.String())
			}
			vals[i] = pgtype.UUID{Bytes: id, Valid: true}
		case v.CanInt():
			n := v.Int()
			if n < math.MinInt32 || n > math.MaxInt32 {
				return nil, fmt.Errorf("%w: %s %d is out of range", errInvalidRecord, c.name, n)
			}
			vals[i] = int32(n)
		default:
			vals[i] = v.Interface()
		}
	}
	return vals, nil
}

// scanTargets returns where to scan a selectQuery row into rec: the field
// itself, or for a null column a pointer that scanned sets afterwards.
func scanTargets(rec *pipeline.Record) (targets []any, scanned func()) {
	rv := reflect.ValueOf(rec).Elem()
	targets = make([]any, len(queryColumns))
	var nulls []func()
	for i, c := range queryColumns {
		field := rv.FieldByIndex(c.index)
		if !c.null {
			targets[i] = field.Addr().Interface()
			continue
		}
		p := reflect.New(reflect.PointerTo(c.typ)) // **T: nil *T for NULL
		targets[i] = p.Interface()
		nulls = append(nulls, func() {
			if !p.Elem().IsNil() {
				field.Set(p.Elem().Elem())
			}
		})
	}
	return targets, func() {
		for _, f := range nulls {
			f()
		}
	}
}

package postgres

import (
	"encoding/binary"
	"fmt"
	"math"
	"reflect"
	"strings"
	"time"

	"github.com/google/uuid"

	"ragtime"
)

// column is one column of the queries table, bound to the ragtime.Record
// field it stores. The list is derived from Record's db tags (see its doc),
// so the insert, the select and the checks before writing are written once.
type column struct {
	name  string
	index []int // reflect field index in ragtime.Record
	// null stores the field's zero value as NULL and reads NULL as zero.
	null bool
	// uuid: the field is a string holding a UUID, in a uuid column.
	uuid bool
	typ  reflect.Type
	// pgType is the column's type as information_schema names it, the one
	// encode writes (TestCopiedColumnTypes compares them with the table).
	pgType string
	// encode appends the field's value as a field of COPY's binary format
	// (its length, then its bytes; a nil pointer is NULL). Its errors are
	// the checks PostgreSQL could not be asked to make and wrap
	// errInvalidRecord.
	encode func(b []byte, v reflect.Value) ([]byte, error)
}

// queryColumns are the queries table's columns, in Record's field order.
var queryColumns = recordColumns(reflect.TypeFor[ragtime.Record](), nil)

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
		c.pgType, c.encode = fieldEncoder(c.name, f.Type, c.uuid)
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

// appendQueryRow appends rec's queries row in COPY's binary format, in
// queryColumns' order, and returns rec's id parsed. It checks what
// PostgreSQL could not be asked to check (a UUID is one, an integer fits an
// int4 column); its errors wrap errInvalidRecord.
func appendQueryRow(b []byte, rec *ragtime.Record) ([]byte, [16]byte, error) {
	id, err := uuid.Parse(rec.QueryID)
	if err != nil {
		return nil, id, fmt.Errorf("%w: id %.80q is not a UUID", errInvalidRecord, rec.QueryID)
	}
	rv := reflect.ValueOf(rec).Elem()
	b = binary.BigEndian.AppendUint16(b, uint16(len(queryColumns)))
	for _, c := range queryColumns {
		v := rv.FieldByIndex(c.index)
		if c.null && v.IsZero() {
			b = appendNull(b)
			continue
		}
		if b, err = c.encode(b, v); err != nil {
			return nil, id, fmt.Errorf("%w: %s %w", errInvalidRecord, c.name, err)
		}
	}
	return b, id, nil
}

// fieldEncoder returns the PostgreSQL type a field of Go type t is stored
// as and the function appending its binary representation; it panics on a
// type it does not know, at start, as recordColumns runs at init.
func fieldEncoder(name string, t reflect.Type, isUUID bool) (string, func([]byte, reflect.Value) ([]byte, error)) {
	switch {
	case isUUID && t.Kind() == reflect.String:
		return "uuid", func(b []byte, v reflect.Value) ([]byte, error) {
			id, err := uuid.Parse(v.String())
			if err != nil {
				return nil, fmt.Errorf("%.80q is not a UUID", v.String())
			}
			b = binary.BigEndian.AppendUint32(b, 16)
			return append(b, id[:]...), nil
		}
	case t == reflect.TypeFor[time.Time]():
		return "timestamp with time zone", func(b []byte, v reflect.Value) ([]byte, error) {
			b = binary.BigEndian.AppendUint32(b, 8)
			return binary.BigEndian.AppendUint64(b, uint64(copyTime(v.Interface().(time.Time)))), nil
		}
	case t.Kind() == reflect.String:
		return "text", func(b []byte, v reflect.Value) ([]byte, error) {
			s := v.String()
			b = binary.BigEndian.AppendUint32(b, uint32(len(s)))
			return append(b, s...), nil
		}
	case t.Kind() == reflect.Int:
		return "integer", func(b []byte, v reflect.Value) ([]byte, error) {
			n := v.Int()
			if n < math.MinInt32 || n > math.MaxInt32 {
				return nil, fmt.Errorf("%d is out of range", n)
			}
			b = binary.BigEndian.AppendUint32(b, 4)
			return binary.BigEndian.AppendUint32(b, uint32(int32(n))), nil
		}
	case t.Kind() == reflect.Float64:
		return "double precision", func(b []byte, v reflect.Value) ([]byte, error) {
			b = binary.BigEndian.AppendUint32(b, 8)
			return binary.BigEndian.AppendUint64(b, math.Float64bits(v.Float())), nil
		}
	case t.Kind() == reflect.Bool:
		return "boolean", func(b []byte, v reflect.Value) ([]byte, error) {
			b = binary.BigEndian.AppendUint32(b, 1)
			if v.Bool() {
				return append(b, 1), nil
			}
			return append(b, 0), nil
		}
	case t.Kind() == reflect.Pointer:
		pgType, elem := fieldEncoder(name, t.Elem(), isUUID)
		return pgType, func(b []byte, v reflect.Value) ([]byte, error) {
			if v.IsNil() {
				return appendNull(b), nil
			}
			return elem(b, v.Elem())
		}
	}
	panic(fmt.Sprintf("postgres: ragtime.Record's column %s has Go type %s, which the recorder cannot store", name, t))
}

// appendNull appends a NULL field of COPY's binary format.
func appendNull(b []byte) []byte {
	return binary.BigEndian.AppendUint32(b, math.MaxUint32) // length -1
}

// scanTargets returns where to scan a selectQuery row into rec: the field
// itself, or for a null column a pointer that scanned sets afterwards.
func scanTargets(rec *ragtime.Record) (targets []any, scanned func()) {
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

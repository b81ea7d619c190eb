// Package migrations holds ragtime's database schema as plain, numbered SQL
// files with goose annotations, embedded in the binary as FS.
//
// The postgres package applies them (ragtime migrate, and serve at start)
// strictly in version order. Add a new NNNN_name.sql file for every change,
// numbered one above the highest there is, and never edit an applied one.
// Numbers up to 0036 were handed out to changes made in parallel, so they
// have gaps and a database may have applied them out of order; postgres
// fills such a database's missing ones and refuses a gap above them.
package migrations

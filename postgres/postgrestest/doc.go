// Package postgrestest gives tests a real PostgreSQL: a fresh, migrated
// database per test (dropped afterwards) on the server DATABASE_URL names.
//
// Its Proxy sits between a test and PostgreSQL and can cut every connection,
// to test what happens when the database goes away while queries arrive.
package postgrestest

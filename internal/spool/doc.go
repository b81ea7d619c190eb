// Package spool is a local, append-only, checksummed first-in-first-out
// queue of opaque records on disk: what ragtime's recorder writes when
// PostgreSQL cannot take finished queries now, and drains into PostgreSQL
// when it can.
//
// A spool is a directory of segment files (NNNNNNNNNNNNNNNNNNNN.seg), each an
// 8-byte file header followed by frames:
//
//	magic "RTSR" | length uint32 | unix nanoseconds int64 | CRC-32C uint32 | payload
//
// (little endian; the CRC covers length, time and payload). Appends go to the
// newest segment and roll over to a new one past Options.SegmentBytes; the
// oldest segments are deleted once every record in them is acknowledged. A
// background syncer fsyncs the newest segment every Options.SyncInterval, so
// a record survives a crash of the process (kill -9, OOM, panic) as soon as
// Append returns (it is in the kernel's page cache) and a crash of the
// machine once the next sync has run.
//
// A frame whose magic, length or checksum is wrong is corrupt: the reader
// logs it with the file and offset, counts it (Stats.Corrupt), skips to the
// next valid frame and goes on. Nothing else about the bytes is trusted.
//
// One process uses a spool directory at a time (an flock on its LOCK file).
package spool

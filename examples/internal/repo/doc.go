// Package repo locates the troupe repository on disk, for the examples that
// fetch their data into <root>/data with scripts kept in the repository.
package repo

// Package gettext reads GNU gettext binary message catalogues (.mo files).
//
// The format (GNU gettext manual, "The Format of GNU MO Files"): a header of
// 32-bit words — magic 0x950412de written in the file's byte order (so both
// little- and big-endian files are recognised), revision, number of strings
// N, offset of the table of original strings, offset of the table of
// translations, hash-table size and offset — followed by two tables of N
// (length, offset) pairs pointing at NUL-terminated strings. A message with a
// context is stored as "context\x04msgid"; a message with plural forms as
// "msgid\x00msgid_plural" with translations "msgstr[0]\x00msgstr[1]\x00…".
// The entry with the empty msgid is the catalogue header (PO metadata).
package gettext

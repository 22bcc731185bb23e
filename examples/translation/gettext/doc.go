// Package gettext reads GNU gettext binary message catalogues (.mo files).
//
// The format (GNU gettext manual, "The Format of GNU MO Files"): 32-bit words
// in the file's byte order (magic 0x950412de, revision, N, the offsets of the
// original and translated string tables, the hash table's size and offset),
// then the two tables of N (length, offset) pairs. A context is stored as
// "context\x04msgid", plural forms as "msgid\x00msgid_plural" with
// "msgstr[0]\x00msgstr[1]…"; the empty msgid's entry is the header.
package gettext

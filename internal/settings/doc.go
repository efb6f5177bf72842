// Package settings declares a command's settings once. Each setting has a
// name, a default, a one-line help, optionally a longer Markdown doc and a
// check of its value; from that one declaration come its flag, its
// environment variable (the prefix, then the name in upper case with dashes
// as underscores), its config-file key (the name) and its row in the docs'
// table (Set.WriteMarkdown).
//
// A Set wraps a flag.FlagSet: parsing stays with the command (ff reads the
// environment and the config file through the FlagSet). Checks that involve
// several settings stay with the command too; a setting's own Check sees
// its value alone. A Set is not safe for concurrent use; commands build one
// per parse.
package settings

// Package docsrun runs the shell examples of README.md and docs/*.md, so that
// a reader who follows them to the letter meets no error the text does not
// predict. Its test, TestDocs, is the runner; this package holds the parser.
//
// # What runs
//
// Every fenced block whose info string is "sh" runs, in the order of its
// file, in one bash process per file (so a variable a block exports or a file
// it writes is there for the next), with `set -e -o pipefail`, from a fresh
// directory whose bin/ holds the flotilla binary built from this tree (so
// `export PATH=$PWD/bin:$PATH` means what it means in the README). A file's
// blocks run in their own network, PID and mount namespaces: the fixed ports
// the docs name (7480, 2379…) are free there, and everything the blocks
// start ends with the file. Other info strings (console, yaml, text…) never
// run.
//
// # Marks
//
// HTML comments, invisible on a rendered page, tell the runner the rest:
//
//	<!-- docs: env dev -->        in a file: before its first block, start
//	                              `flotilla dev --data-dir flotilla-dev` (what
//	                              `make run` runs) and wait until it answers
//	<!-- docs: skip REASON -->    on the line before a block: do not run it,
//	                              for the reason given (it needs real hosts,
//	                              root's paths, a million processes…)
//	<!-- docs: interrupt -->      on the line before a block, in a file of
//	                              env dev: first stop that flotilla dev as
//	                              the reader's Ctrl-C does (SIGINT), and
//	                              wait until it has exited
//
// And two trailing comments on a command, which read well to a person too:
//
//	cmd ...   # exits 2: ...      cmd must exit with that status
//	cmd ...   # ... Ctrl-C ...    cmd follows until interrupted: it gets
//	                              SIGINT after a few seconds, and must not have
//	                              failed before
//
// A block that fails fails the test with its file, line and output.
package docsrun

// Whole log lines on stderr, one write(2) each. The daemon, its workers and
// the machine supervisor share one log (a file or the bench's pipe), and the
// bench and scripts/fork_timeline.py parse it line by line. An unbuffered
// stderr lets glibc 2.37+ write a long fprintf in 128-byte pieces (its
// printf stages output for an unbuffered stream), so another process's line
// could land inside one (seen on the H200, glibc 2.39: a clone's
// "fork: clone 0 ..." line cut by a worker's, lost to the bench's parser).
#pragma once

namespace smolvm {

// Makes stderr line-buffered with a buffer of its own: a line up to 64 KiB,
// however many calls wrote it, leaves in one write at its newline. Call once
// at the start of main, before anything is written. A line without its
// newline waits for the next newline, a flush or exit().
void StderrWholeLines();

}  // namespace smolvm

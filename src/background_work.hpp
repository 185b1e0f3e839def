// Internal: work the supervisor's loop must not wait for, on a thread of
// its own (one per process, started at the first job, never stopped).
//
// What goes here: emptying and dropping a run's workspace tmpfs once
// nothing else reaches it (Workspace::remove_tmpfs). A run that filled its
// 1 GiB workspace with empty files (263,000, the most its inodes allow)
// cost the loop 1.1 s of unlinks at its end, measured here, while every
// other run's pipes, deadlines and exits waited; the kernel's teardown at
// the last close (task work of the closing thread: fs/namespace.c
// mntput_no_expire) ~0.3 s more. Here they cost the loop nothing. And
// the rest of a directory workspace past its first 4,096 entries
// (Workspace::remove_or_hand_off), with the run's uid released after it.
//
// The thread blocks every signal. Jobs run one at a time, in order; a job
// must not touch the supervisor's state. With two jobs already waiting, or
// in a process forked after the thread started (the thread is not in the
// copy), a job runs in the caller: what waits for the thread stays
// bounded (two workspaces' memory and fds), and past that the loop is held
// back as before.
#pragma once

#include <functional>

namespace corral::detail {

void run_in_background(std::function<void()> job);

// Blocks until every job handed over so far has run (tests; a caller that
// must see the memory back).
void wait_for_background_work();

}  // namespace corral::detail

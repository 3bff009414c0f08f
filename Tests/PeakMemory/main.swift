// `PeakMemory PROGRAM ARGUMENTS…`: runs PROGRAM as its child, waits for it with `wait4`, and
// prints the child's peak resident set in bytes as its last line on stderr, then exits with
// the child's status (128 + the signal when one killed it).
//
// A separate small process on purpose: Linux counts, in an exec'd child's peak RSS, the
// peak of the process that spawned it (posix_spawn shares the parent's memory until the
// exec), so a test process that built a 64 MiB batch would read its own peak as the child's.
import Glibc

/// Writes `line` to standard error (file descriptor 2).
func report(_ line: String) {
    let text = line + "\n"
    _ = text.withCString { write(2, $0, strlen($0)) }
}

let arguments = Array(CommandLine.arguments.dropFirst())
guard let program = arguments.first else {
    report("usage: PeakMemory PROGRAM [ARGUMENTS…]")
    exit(64)
}
let argv = arguments.map { $0.withCString { strdup($0) } } + [nil]
var pid: pid_t = 0
let spawned = posix_spawn(&pid, program, nil, nil, argv, environ)
guard spawned == 0 else {
    report("PeakMemory: cannot run \(program): \(String(cString: strerror(spawned)))")
    exit(127)
}
var status: Int32 = 0
var usage = rusage()
while wait4(pid, &status, 0, &usage) < 0 && errno == EINTR {}
// ru_maxrss is in kilobytes on Linux.
report("peak-rss \(Int(usage.ru_maxrss) * 1024)")
exit(status & 0x7F == 0 ? (status >> 8) & 0xFF : 128 + (status & 0x7F))

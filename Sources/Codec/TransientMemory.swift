// Large buffers that live for one commit: a batch's compressed payloads. The C library
// maps each allocation of 32 MiB or more on its own and unmaps it when freed, so every such
// buffer starts as fresh memory, and with 4 KiB pages its first write faults once per
// page: 16,384 faults for a 64 MiB buffer. With a large batch's encoding and its group's
// frames laid out the same way, that was half the commit thread's time in a fill of 64 KiB
// values (Benchmarks/JOURNAL.md, "Commits of 64 MiB"); neither is laid out whole any more.
// Asked for transparent huge pages before that first write, such a buffer takes one fault
// per 2 MiB.
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

package enum TransientMemory {
    /// From this size glibc, with its default thresholds (its mmap threshold grows to
    /// 32 MiB at most on 64-bit systems), gives every allocation a mapping of its own, so
    /// advice on it reaches no other allocation and ends with it. Where an allocation of
    /// this size comes from a heap instead (another C library, or a threshold the
    /// application raised), the advice is still only a hint on memory this process owns:
    /// huge pages behind the aligned part of a buffer that is written whole.
    package static let hugePageThreshold = 32 << 20

    /// Asks for huge pages behind the 2 MiB-aligned part of `memory`, an allocation of
    /// this process not yet written, when it is at least `hugePageThreshold` bytes; a
    /// hint the kernel may ignore (transparent huge pages off). Linux only.
    package static func adviseHugePages(_ memory: UnsafeMutableRawBufferPointer) {
        #if os(Linux)
        guard memory.count >= hugePageThreshold, let base = memory.baseAddress else { return }
        let hugePage = 2 << 20
        let start = (Int(bitPattern: base) + hugePage - 1) & ~(hugePage - 1)
        let end = (Int(bitPattern: base) + memory.count) & ~(hugePage - 1)
        guard end > start, let aligned = UnsafeMutableRawPointer(bitPattern: start) else { return }
        _ = madvise(aligned, end - start, MADV_HUGEPAGE)
        #endif
    }
}

// The memtable's memory: nodes are carved out of large blocks and never freed one by one;
// dropping the memtable frees its blocks. No per-node allocation, header or reference count.
// Thread-safety: used only by the memtable's single writer (and its deinit); its next
// large block is made ready on another thread (`SpareBlock`).
import Foundation
import Synchronization
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

struct MemtableArena {
    /// Blocks start small (a store holding a handful of keys stays small) and double up to
    /// this size; a request above a quarter of the next block's size gets a block of its
    /// own (large values), and the blocks after it grow as if it had taken that block. So
    /// what is left unused at a block's end is less than a quarter of the next block.
    /// One huge page: a full memtable's blocks are backed by huge pages (`MappedMemory`),
    /// and a skip-list search, which touches nodes all over them, misses the TLB far less
    /// (records-sort-text at 1M keys, five alternating runs each: 20.5k → 23.0k queries/s
    /// on average, from 1 MiB blocks).
    static let largestBlockBytes = 2 << 20
    static let firstBlockBytes = 4 << 10
    /// The smallest `blockLimit`.
    static let smallestBlockLimit = 64 << 10

    /// The size the blocks grow to: `largestBlockBytes`, or less for a small memtable.
    let blockLimit: Int
    private var blocks: [(start: UnsafeMutableRawPointer, byteCount: Int)] = []
    /// The next block of `blockLimit` bytes, backed with memory on another thread while
    /// the current one fills.
    private let spare: SpareBlock
    private var cursor: UnsafeMutableRawPointer?
    private var remaining = 0
    private var nextBlockBytes = firstBlockBytes
    /// Bytes of every block reserved so far.
    private(set) var reservedBytes = 0
    /// Blocks mapped so far.
    var blockCount: Int { blocks.count }
    /// How many of its blocks were ready before it needed them (`SpareBlock`).
    private(set) var spareBlocksTaken = 0

    /// An arena whose blocks grow to `blockLimit` (a power of two from `smallestBlockLimit`
    /// to `largestBlockBytes`), its next block made ready in `spare`.
    init(blockLimit: Int = largestBlockBytes, spare: SpareBlock = SpareBlock()) {
        precondition(blockLimit & (blockLimit - 1) == 0
                     && (Self.smallestBlockLimit...Self.largestBlockBytes).contains(blockLimit),
                     "a block limit is a power of two from 64 KiB to 2 MiB")
        self.blockLimit = blockLimit
        self.spare = spare
    }

    /// The block limit for a memtable expected to grow to about `budgetBytes`: an eighth of
    /// it, so that what its last block and its spare hold beyond the budget stays a fraction
    /// of it (a memtable of 4 MiB with blocks of 2 MiB held up to 8 MiB). Blocks of 2 MiB
    /// from a budget of 16 MiB up, the default's size, backed by huge pages.
    static func blockLimit(forBudget budgetBytes: Int) -> Int {
        var limit = smallestBlockLimit
        while limit < largestBlockBytes && limit * 2 <= budgetBytes / 8 { limit *= 2 }
        return limit
    }

    /// `byteCount` bytes aligned to 8, valid until `deallocateAll()`.
    mutating func allocate(_ byteCount: Int) -> UnsafeMutableRawPointer {
        let size = (byteCount + 7) & ~7
        if size <= remaining, let start = cursor {
            cursor = start + size
            remaining -= size
            return start
        }
        if size > nextBlockBytes / 4 {
            // The blocks grow here too: when they grew only on the other path, a node of
            // a few KiB got a block of its own, and so did every one after it (values of
            // 4 KiB: a mapping and an unmapping per value; fillrandom of 100,000 took
            // 448,042 page faults, 3.15 s in the kernel against 0.97 s in the process).
            nextBlockBytes = min(nextBlockBytes * 2, blockLimit)
            return newBlock(size)
        }
        let blockBytes = nextBlockBytes
        nextBlockBytes = min(nextBlockBytes * 2, blockLimit)
        let block = newBlock(blockBytes)
        cursor = block + size
        remaining = blockBytes - size
        return block
    }

    func deallocateAll() {
        for block in blocks { MappedMemory.deallocate(block.start, byteCount: block.byteCount) }
        spare.abandon()
    }

    private mutating func newBlock(_ byteCount: Int) -> UnsafeMutableRawPointer {
        let block: UnsafeMutableRawPointer
        if byteCount == blockLimit {
            if let ready = spare.take() {
                block = ready
                spareBlocksTaken += 1
            } else {
                block = MappedMemory.allocate(byteCount, populated: true)
            }
            spare.prepare(byteCount)
        } else {
            block = MappedMemory.allocate(byteCount, populated: true)
        }
        blocks.append((block, byteCount))
        reservedBytes += byteCount
        return block
    }
}

/// A block of memory made ready for an arena before it is needed: mapped and backed with
/// memory on a thread of its own, while the arena's writer (the commits' applier) goes
/// on filling the block before it. Backing a block of 2 MiB takes the kernel 0.3 ms on a
/// virtual machine whose memory was touched before, and 6–20 ms where it never was; done
/// by the applier, every commit behind it waited that long (in a five-minute overwrite the
/// slowest commit fell from 85 to 44 ms, Benchmarks/JOURNAL.md). Thread-safety: every
/// method from any thread, under `state`'s lock.
final class SpareBlock: Sendable {
    private struct State {
        /// The ready block's address, or 0.
        var ready = 0
        var byteCount = 0
        var preparing = false
        /// Set when the arena is freed: a block made after that is freed at once.
        var abandoned = false
    }

    private let state = Mutex(State())

    /// The ready block, if one is; the caller owns it.
    func take() -> UnsafeMutableRawPointer? {
        state.withLock { state in
            defer { state.ready = 0 }
            return UnsafeMutableRawPointer(bitPattern: state.ready)
        }
    }

    /// Starts making a block of `byteCount` ready, unless one is or is being made.
    func prepare(_ byteCount: Int) {
        let starts = state.withLock { state in
            guard state.ready == 0, !state.preparing, !state.abandoned else { return false }
            state.preparing = true
            return true
        }
        guard starts else { return }
        // A thread of its own, as a checkpoint's: not one of Swift's cooperative pool.
        Thread.detachNewThread { [self] in
            let block = MappedMemory.allocate(byteCount, populated: true)
            let kept = state.withLock { state in
                state.preparing = false
                guard !state.abandoned else { return false }
                state.ready = Int(bitPattern: block)
                state.byteCount = byteCount
                return true
            }
            if !kept { MappedMemory.deallocate(block, byteCount: byteCount) }
        }
    }

    /// Whether `abandon()` was called.
    var isAbandoned: Bool { state.withLock { $0.abandoned } }

    /// Frees the ready block, and any block still being made once it is.
    func abandon() {
        let (ready, byteCount) = state.withLock { state in
            state.abandoned = true
            defer { state.ready = 0 }
            return (state.ready, state.byteCount)
        }
        if let block = UnsafeMutableRawPointer(bitPattern: ready) { MappedMemory.deallocate(block, byteCount: byteCount) }
    }
}

/// Zeroed memory straight from the kernel (a private anonymous mapping), given back to it
/// when freed. The memtable's blocks, hash index and filter live here, not in malloc's
/// heaps: glibc keeps freed heap memory resident (a thread's heap shrinks only from its top,
/// and freeing one large mapped chunk raises the size below which later requests come from
/// a heap), so the memtables a checkpoint had dropped stayed in the process — 84 MB of
/// anonymous memory after a 1M-key fill whose live memtable held 8 MB. A mapping costs a
/// system call per block (2 MiB at most, see `MemtableArena`), nothing per node.
enum MappedMemory {
    /// `byteCount` (> 0) zeroed bytes, page aligned; free them with `deallocate`. `populated`
    /// backs them with memory at once: for blocks about to be filled, not for sparse tables.
    static func allocate(_ byteCount: Int, populated: Bool = false) -> UnsafeMutableRawPointer {
        precondition(byteCount > 0, "a mapping holds at least one byte")
        #if os(Linux)
        // A populated table of 2 MiB or more (a loaded memtable's hash index) is backed by
        // huge pages: every lookup probes it at a random place, and with 4 KiB pages most
        // probes also missed the TLB (records-relations at 1M keys: 871 → 1,112 and 799 →
        // 939 queries/s). Memory already backed whole costs no more in huge pages; a sparse
        // table keeps small ones, so that an idle store's index costs only what it touched.
        let huge = populated && byteCount >= hugePageBytes
        // Populated: the kernel fills the whole block in one call instead of one page fault
        // per 4 KiB page as nodes reach it (recovery: 148 → 196 MiB/s, mean of six runs).
        let flags = MAP_PRIVATE | MAP_ANONYMOUS | (populated && !huge ? MAP_POPULATE : 0)
        #else
        let flags = MAP_PRIVATE | MAP_ANONYMOUS
        #endif
        guard let start = mmap(nil, byteCount, PROT_READ | PROT_WRITE, flags, -1, 0),
              start != MAP_FAILED else {
            fatalError("out of memory: could not map \(byteCount) bytes (errno \(errno))")
        }
        #if os(Linux)
        if huge {
            // A hint: where transparent huge pages are off, the pages stay small. Then
            // backed at once, as MAP_POPULATE would have (it ran before the hint could).
            _ = madvise(start, byteCount, MADV_HUGEPAGE)
            if madvise(start, byteCount, populateWrite) != 0 {
                // A kernel before 5.14: a write per page faults each in.
                for offset in stride(from: 0, to: byteCount, by: Int(getpagesize())) { start.storeBytes(of: 0, toByteOffset: offset, as: UInt8.self) }
            }
        }
        #endif
        return start
    }

    #if os(Linux)
    /// The size of a transparent huge page on x86-64 and most arm64 kernels.
    private static let hugePageBytes = 2 << 20
    /// MADV_POPULATE_WRITE (Linux 5.14), which the C library's headers may not name.
    private static let populateWrite: Int32 = 23
    #endif

    /// Gives back memory from `allocate(byteCount)`, with the same `byteCount`.
    static func deallocate(_ start: UnsafeMutableRawPointer, byteCount: Int) {
        munmap(start, byteCount)
    }
}

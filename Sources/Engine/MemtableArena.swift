// The memtable's memory: nodes are carved out of large blocks and never freed one by one;
// dropping the memtable frees its blocks. No per-node allocation, header or reference count.
// Thread-safety: used only by the memtable's single writer (and its deinit).
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
    /// own (large values), so at most a quarter of a block is ever left unused at its end.
    /// One huge page: a full memtable's blocks are backed by huge pages (`MappedMemory`),
    /// and a skip-list search, which touches nodes all over them, misses the TLB far less
    /// (records-sort-text at 1M keys, five alternating runs each: 20.5k → 23.0k queries/s
    /// on average, from 1 MiB blocks).
    static let largestBlockBytes = 2 << 20
    static let firstBlockBytes = 4 << 10

    private var blocks: [(start: UnsafeMutableRawPointer, byteCount: Int)] = []
    private var cursor: UnsafeMutableRawPointer?
    private var remaining = 0
    private var nextBlockBytes = firstBlockBytes
    /// Bytes of every block reserved so far.
    private(set) var reservedBytes = 0

    /// `byteCount` bytes aligned to 8, valid until `deallocateAll()`.
    mutating func allocate(_ byteCount: Int) -> UnsafeMutableRawPointer {
        let size = (byteCount + 7) & ~7
        if size <= remaining, let start = cursor {
            cursor = start + size
            remaining -= size
            return start
        }
        if size > nextBlockBytes / 4 {
            return newBlock(size)
        }
        let blockBytes = nextBlockBytes
        nextBlockBytes = min(nextBlockBytes * 2, Self.largestBlockBytes)
        let block = newBlock(blockBytes)
        cursor = block + size
        remaining = blockBytes - size
        return block
    }

    func deallocateAll() {
        for block in blocks { MappedMemory.deallocate(block.start, byteCount: block.byteCount) }
    }

    private mutating func newBlock(_ byteCount: Int) -> UnsafeMutableRawPointer {
        let block = MappedMemory.allocate(byteCount, populated: true)
        blocks.append((block, byteCount))
        reservedBytes += byteCount
        return block
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

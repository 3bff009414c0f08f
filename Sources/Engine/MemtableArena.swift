// The memtable's memory: nodes are carved out of large blocks and never freed one by one;
// dropping the memtable frees its blocks. No per-node allocation, header or reference count.
// Thread-safety: used only by the memtable's single writer (and its deinit).

struct MemtableArena {
    /// Blocks start small (a store holding a handful of keys stays small) and double up to
    /// this size; a request above a quarter of the next block's size gets a block of its
    /// own (large values), so at most a quarter of a block is ever left unused at its end.
    static let largestBlockBytes = 1 << 20
    static let firstBlockBytes = 4 << 10

    private var blocks: [UnsafeMutableRawPointer] = []
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
        for block in blocks { block.deallocate() }
    }

    private mutating func newBlock(_ byteCount: Int) -> UnsafeMutableRawPointer {
        let block = UnsafeMutableRawPointer.allocate(byteCount: byteCount, alignment: 8)
        blocks.append(block)
        reservedBytes += byteCount
        return block
    }
}

// Leaves stored LZ4-compressed (FORMAT.md, "Compressed leaves").
//
// A leaf whose cells fit one page is written raw, as always, and read where it lies in the
// mapping. With `EngineOptions.leafCompression` set to `.lz4`, a checkpoint may instead
// gather up to `maxExpandedLeafBytes` of cells into one leaf, laid out exactly as a raw leaf
// of that length, and store its cells (not its slots, which are rebuilt from them) as one
// LZ4 block in a single page; the header stays readable, and the checksum covers the page
// as written. A
// page still holds one leaf, so the free list, copy-on-write and page reuse are unchanged;
// what compression buys is fewer leaves. A reader expands such a leaf once into the page
// cache and searches the expansion like any other page.
//
// Invariants:
//  CompressedLeaf.C1. A compressed leaf's expansion is its header, hint offset and slots
//      plus its stated cell bytes, at most `maxExpandedLeafBytes`, and is allocated only
//      after the lengths were checked against those limits and the page (a hostile page
//      costs no large allocation).
//  CompressedLeaf.C2. The expansion is the raw leaf the cells were encoded from, byte for
//      byte (its header with the compressed bit cleared), so every search and decoder reads
//      it as a raw leaf of its own length.
import StrataCodec

extension PageCodec {
    /// Header byte 5 bit 2 of a leaf (format 4): its body is one LZ4 block.
    static let compressedBody: UInt8 = 4
    /// A compressed leaf's header byte 5 as this build writes it.
    static let compressedLeafFormat = hintedLeafFormat | compressedBody
    /// Where a compressed leaf's LZ4 block starts: after its body's length (4 bytes) and
    /// the block's (4 bytes).
    static let compressedBlockStart = PageHeader.bytes + 8
    /// A leaf is stored compressed only when its block takes at most this much of its cells.
    static let compressionWorthwhile = (numerator: 7, denominator: 8)
    /// LZ4's acceleration for leaves: the tightest packing (the log takes speed instead).
    static let leafAcceleration: Int32 = 1

    /// The longest leaf, header included, a compressed page may expand to: four pages, and
    /// never past what a cell's 2-byte offset reaches (so a 64 KiB page's leaves, which
    /// reach it already, are never compressed).
    static func maxExpandedLeafBytes(pageBytes: Int) -> Int { max(pageBytes, min(4 * pageBytes, 65_535)) }

    /// The most bytes of cells and slots a compressed leaf may hold.
    static func maxExpandedCapacity(pageBytes: Int) -> Int { maxExpandedLeafBytes(pageBytes: pageBytes) - hintedSlotsStart }

    /// Whether a verified tree page is a compressed leaf.
    @inline(__always)
    static func isCompressedLeaf(_ page: UnsafeRawBufferPointer) -> Bool {
        page[leafFormatOffset] & compressedBody != 0
    }

    /// How a run of cells went into one page.
    enum EncodedLeaf {
        /// A page to write; `blockRatio` is its LZ4 block's bytes ÷ its body's when it was
        /// compressed.
        case page([UInt8], blockRatio: Double?)
        /// The cells fit neither raw nor compressed: their block took `blockBytes`, the page
        /// has room for `room`.
        case tooLarge(blockRatio: Double, blockBytes: Int, room: Int)
    }

    /// `cells` as one leaf page: raw when they fit one page; else, with `compress`, as a
    /// compressed leaf when its block fits the page (`scratch` holds the block meanwhile).
    /// The block holds the cells alone, each with its whole key, as a leaf of format 3 of
    /// their length lays them out (the last key's cell first): slots and hints are rebuilt
    /// from them when it is expanded.
    /// Without `compress`, cells that do not fit are a caller's error.
    static func encodeLeafPage(cells: ArraySlice<CellToWrite>, id: PageID, generation: UInt64, pageBytes: Int,
                               compress: Bool, scratch: inout [UInt8]) -> EncodedLeaf {
        if !compress || leafBytes(cells) <= hintedCapacity(pageBytes: pageBytes) {
            return .page(encodeLeaf(cells: cells, id: id, generation: generation, pageBytes: pageBytes), blockRatio: nil)
        }
        let total = cells.reduce(0) { $0 + $1.cellBytes }
        precondition(total <= maxExpandedCapacity(pageBytes: pageBytes), "a compressed leaf's cells overflow its expansion")
        let expanded = encodeLeaf(cells: cells, id: id, generation: generation, pageBytes: hintedSlotsStart + total, elide: false)
        let cellsStart = hintedSlotsStart + hintedSlotBytes * cells.count
        let cellBytes = expanded.count - cellsStart
        let bound = LZ4Block.compressBound(cellBytes)
        if scratch.count < bound { scratch = [UInt8](repeating: 0, count: bound) }
        let room = pageBytes - compressedBlockStart
        let compressed = expanded.withUnsafeBytes { expanded in
            scratch.withUnsafeMutableBytes { scratch in
                LZ4Block.compress(UnsafeRawBufferPointer(rebasing: expanded[cellsStart...]), into: scratch,
                                  acceleration: leafAcceleration)
            }
        }
        // Cells that do not compress by an eighth stay raw (split into pages they fit): a
        // raw leaf is read in place, a compressed one only through an expansion. They
        // count as taking their whole size, so the writer stops giving leaves more cells
        // than a page holds raw.
        guard let blockBytes = compressed, blockBytes * compressionWorthwhile.denominator
                <= cellBytes * compressionWorthwhile.numerator else {
            return .tooLarge(blockRatio: max(1, Double(compressed ?? cellBytes) / Double(cellBytes)),
                             blockBytes: max(compressed ?? cellBytes, cellBytes), room: room)
        }
        let ratio = Double(blockBytes) / Double(expanded.count - PageHeader.bytes)
        guard blockBytes <= room else { return .tooLarge(blockRatio: ratio, blockBytes: blockBytes, room: room) }
        var page = emptyPage(.leaf, id: id, generation: generation, count: cells.count, word: 0, pageBytes: pageBytes)
        page[leafFormatOffset] = compressedLeafFormat
        page.withUnsafeMutableBytes { page in
            page.storeBytes(of: UInt32(cellBytes).littleEndian, toByteOffset: PageHeader.bytes, as: UInt32.self)
            page.storeBytes(of: UInt32(blockBytes).littleEndian, toByteOffset: PageHeader.bytes + 4, as: UInt32.self)
            scratch.withUnsafeBytes { scratch in
                (page.baseAddress! + compressedBlockStart).copyMemory(from: scratch.baseAddress!, byteCount: blockBytes)
            }
        }
        seal(&page)
        return .page(page, blockRatio: ratio)
    }

    /// Gives an encoded page another ID (a relocation learns its target after checking the
    /// page fits).
    static func readdress(_ page: inout [UInt8], to id: PageID) {
        withUnsafeBytes(of: id.rawValue.littleEndian) { for index in 0..<8 { page[8 + index] = $0[index] } }
        seal(&page)
    }

    /// The leaf a verified compressed page holds, expanded: its cells decompressed, their
    /// slots and hints rebuilt (CompressedLeaf.C1, C2). Every cell is walked within bounds
    /// first; a block whose cells do not add up to its leaf's count is a `PageDefect`.
    static func expandLeaf(_ page: UnsafeRawBufferPointer, pageBytes: Int) throws(PageDefect) -> [UInt8] {
        let expanded = try expandLeafIntoBuffer(page, pageBytes: pageBytes)
        defer { expanded.deallocate() }
        return Array(expanded)
    }

    /// `expandLeaf` into memory the caller then owns (and deallocates): what the page cache
    /// holds, made with one allocation and the cells decompressed in place.
    static func expandLeafIntoBuffer(_ page: UnsafeRawBufferPointer, pageBytes: Int) throws(PageDefect) -> UnsafeMutableRawBufferPointer {
        guard page.count == pageBytes, pageBytes > compressedBlockStart else { throw PageDefect("its compressed body is truncated") }
        let count = Int(UInt16(littleEndian: page.loadUnaligned(fromByteOffset: 6, as: UInt16.self)))
        let cellBytes = Int(UInt32(littleEndian: page.loadUnaligned(fromByteOffset: PageHeader.bytes, as: UInt32.self)))
        let blockBytes = Int(UInt32(littleEndian: page.loadUnaligned(fromByteOffset: PageHeader.bytes + 4, as: UInt32.self)))
        let cellsStart = hintedSlotsStart + hintedSlotBytes * count
        let limit = maxExpandedLeafBytes(pageBytes: pageBytes)
        guard count > 0, cellBytes > 0, cellsStart + cellBytes <= limit else {
            throw PageDefect("its \(count) compressed cells claim \(cellBytes) bytes, more than a leaf of \(limit) bytes holds")
        }
        guard blockBytes > 0, blockBytes < cellBytes, compressedBlockStart + blockBytes <= pageBytes else {
            throw PageDefect("its LZ4 block claims \(blockBytes) bytes, more than the page or its cells hold")
        }
        for index in (compressedBlockStart + blockBytes)..<pageBytes where page[index] != 0 {
            throw PageDefect("byte \(index), past its LZ4 block, is not zero")
        }
        let expanded = UnsafeMutableRawBufferPointer.allocate(byteCount: cellsStart + cellBytes, alignment: 16)
        do {
            try fillExpansion(expanded, of: page, count: count, cellsStart: cellsStart,
                              block: UnsafeRawBufferPointer(rebasing: page[compressedBlockStart..<(compressedBlockStart + blockBytes)]))
        } catch {
            expanded.deallocate()
            throw error
        }
        return expanded
    }

    /// Writes the expansion of a compressed leaf of `count` cells whose lengths were checked
    /// into `expanded`: the header, the cells decompressed at `cellsStart`, then the hint
    /// offset and the slots, from a walk of the cells that stays within them.
    private static func fillExpansion(_ expanded: UnsafeMutableRawBufferPointer, of page: UnsafeRawBufferPointer, count: Int,
                                      cellsStart: Int, block: UnsafeRawBufferPointer) throws(PageDefect) {
        let cellBytes = expanded.count - cellsStart
        do { try LZ4Block.decompress(block, into: UnsafeMutableRawBufferPointer(rebasing: expanded[cellsStart...])) } catch {
            throw PageDefect("its LZ4 block does not expand to its \(cellBytes) bytes of cells")
        }
        expanded.copyMemory(from: UnsafeRawBufferPointer(rebasing: page[..<PageHeader.bytes]))
        expanded[leafFormatOffset] &= ~compressedBody
        // Cells lie last key first: the k-th from the start is cell count - 1 - k. Each
        // slot's offset is stored as its cell is reached; hints wait for the prefix.
        let bytes = UnsafeRawBufferPointer(expanded)
        let end = expanded.count
        var at = cellsStart
        var firstKey = 0..<0
        var lastKey = 0..<0
        do {
            for index in (0..<count).reversed() {
                guard at < end else { throw PageDefect("its cells end before cell \(index)") }
                expanded.storeBytes(of: UInt16(at).littleEndian, toByteOffset: hintedSlotsStart + hintedSlotBytes * index, as: UInt16.self)
                let keyVarint = try Varint.read(bytes, at: &at, end: end)
                guard keyVarint > 0, keyVarint <= UInt64(Limits.maxKeyBytes), keyVarint <= UInt64(end - at) else {
                    throw PageDefect("cell \(index) has a key of \(keyVarint) bytes")
                }
                let keyLength = Int(keyVarint)
                if index == count - 1 { lastKey = at..<(at + keyLength) }
                if index == 0 { firstKey = at..<(at + keyLength) }
                at += keyLength
                _ = try Varint.read(bytes, at: &at, end: end)
                guard at < end else { throw PageDefect("cell \(index) ends before its flags") }
                let flags = bytes[at]
                at += 1
                switch flags {
                case 0:
                    let valueLength = try Varint.read(bytes, at: &at, end: end)
                    guard valueLength <= UInt64(end - at) else { throw PageDefect("cell \(index) has a value past its leaf") }
                    at += Int(valueLength)
                case overflowFlag, runFlag:
                    let size = flags == runFlag ? 20 : 12
                    guard end - at >= size else { throw PageDefect("cell \(index) has an overflow reference past its leaf") }
                    at += size
                case tombstoneFlag: break
                default: throw PageDefect("cell \(index) has flags \(flags)")
                }
            }
        } catch let defect as PageDefect {
            throw defect
        } catch {
            throw PageDefect("its compressed cells do not decode: \(error)")
        }
        guard at == end else { throw PageDefect("its block holds \(end - at) bytes after its \(count) cells") }
        // The hint offset is the first and last keys' common prefix (FORMAT.md, "Hints").
        var prefix = 0
        while prefix < min(firstKey.count, lastKey.count) && bytes[firstKey.lowerBound + prefix] == bytes[lastKey.lowerBound + prefix] {
            prefix += 1
        }
        expanded.storeBytes(of: UInt16(prefix).littleEndian, toByteOffset: PageHeader.bytes, as: UInt16.self)
        for index in 0..<count {
            let slot = hintedSlotsStart + hintedSlotBytes * index
            let offset = Int(UInt16(littleEndian: bytes.loadUnaligned(fromByteOffset: slot, as: UInt16.self)))
            // The key's length is a varint of at most two bytes (keys are at most 768 bytes).
            var keyStart = offset
            let keyLength = Int((try? Varint.read(bytes, at: &keyStart, end: end)) ?? 0)
            let hint = hint(of: UnsafeRawBufferPointer(rebasing: bytes[keyStart..<(keyStart + keyLength)]), at: prefix)
            expanded.storeBytes(of: hint.bigEndian, toByteOffset: slot + 2, as: UInt32.self)
        }
    }
}

// Leaves stored LZ4-compressed (FORMAT.md, "Compressed leaves").
//
// A leaf whose cells fit one page is written raw, as always, and read where it lies in the
// mapping. With `EngineOptions.leafCompression` set to `.lz4`, a checkpoint may instead
// gather up to `maxExpandedLeafBytes` of cells into one leaf, laid out exactly as a raw leaf
// of that length, and store its cells (not its slots, which are rebuilt from them) LZ4-
// compressed in a single page; the header stays readable, and the checksum covers the page
// as written. A page still holds one leaf, so the free list, copy-on-write and page reuse
// are unchanged; what compression buys is fewer leaves.
//
// This build writes a leaf's cells in pieces of about `pieceBytes`, each its own LZ4 block,
// with the first key of every piece but the first stored before the blocks (format 7). A
// point read finds its piece by those keys, decompresses that piece alone and walks its
// cells once for the key, then drops it: about 1 KiB decompressed a read, where a leaf of
// one block (format 4, still read) expands whole. A cursor, which walks every cell,
// expands the whole leaf once and walks the expansion like any page: into the page cache
// for a walk's first leaves, beside it once they take a quarter of it (TreeCursor).
//
// Invariants:
//  CompressedLeaf.C1. A compressed leaf's expansion is its header, hint offset and slots
//      plus its stated cell bytes, at most `maxExpandedLeafBytes`, and is allocated only
//      after the lengths were checked against those limits and the page (a hostile page
//      costs no large allocation); so is a point read's piece, which is never larger.
//  CompressedLeaf.C2. The expansion is the raw leaf the cells were encoded from, byte for
//      byte (its header with byte 5 set to format 3's 3), so every search and decoder reads
//      it as a raw leaf of its own length; a point read walks a piece's cells as it walks
//      the whole leaf's.
//  CompressedLeaf.C3. A piece's stored first key is the first key of its cells: the full
//      expansion checks every one (so `verify` reports a forged one), and a point read the
//      one of the piece it expands. (Between two pieces a point read trusts the order the
//      checksum vouches for, as a search of a raw leaf trusts its slots.)
import StrataCodec

extension PageCodec {
    /// Header byte 5 bit 2 of a leaf (formats 4 and 7): its body is LZ4-compressed.
    static let compressedBody: UInt8 = 4
    /// A compressed leaf of one LZ4 block (format 4, still read): header byte 5.
    static let compressedLeafFormat = hintedLeafFormat | compressedBody
    /// A compressed leaf in pieces (format 7), as this build writes it: header byte 5.
    static let piecedLeafFormat = compressedLeafFormat | elidedPrefix
    /// Where a one-block compressed leaf's LZ4 block starts: after its body's length (4
    /// bytes) and the block's (4 bytes).
    static let compressedBlockStart = PageHeader.bytes + 8
    /// Where a pieced leaf's piece entries start: after its cells' bytes (4), its pieces (2)
    /// and where its blocks start (2).
    static let pieceEntriesStart = PageHeader.bytes + 8
    /// Bytes of a piece entry: its cells, their bytes and its block's bytes, 2 each.
    static let pieceEntryBytes = 6
    /// Bytes of cells a piece is given before the next one starts (a piece holds at least
    /// one cell): a point read decompresses about this much.
    static let pieceBytes = 1_024
    /// A leaf is stored compressed only when its body takes at most this much of its cells.
    static let compressionWorthwhile = (numerator: 7, denominator: 8)
    /// LZ4's acceleration for leaves: the tightest packing (the log takes speed instead).
    static let leafAcceleration: Int32 = 1

    /// The longest leaf, header included, a compressed page may expand to: four pages, and
    /// never past what a cell's 2-byte offset reaches (so a 64 KiB page's leaves, which
    /// reach it already, are never compressed).
    static func maxExpandedLeafBytes(pageBytes: Int) -> Int { max(pageBytes, min(4 * pageBytes, 65_535)) }

    /// The most bytes of cells and slots a compressed leaf may hold.
    static func maxExpandedCapacity(pageBytes: Int) -> Int { maxExpandedLeafBytes(pageBytes: pageBytes) - hintedSlotsStart }

    /// Whether a verified tree page is a compressed leaf (of either form).
    @inline(__always)
    static func isCompressedLeaf(_ page: UnsafeRawBufferPointer) -> Bool {
        page[leafFormatOffset] & compressedBody != 0
    }

    /// Whether a verified tree page is a compressed leaf in pieces.
    @inline(__always)
    static func isPiecedLeaf(_ page: UnsafeRawBufferPointer) -> Bool {
        page[leafFormatOffset] == piecedLeafFormat
    }

    /// How a run of cells went into one page.
    enum EncodedLeaf {
        /// A page to write; `blockRatio` is its compressed body's bytes ÷ its cells' when it
        /// was compressed.
        case page([UInt8], blockRatio: Double?)
        /// The cells fit neither raw nor compressed: their compressed body took `blockBytes`,
        /// the page has room for `room`.
        case tooLarge(blockRatio: Double, blockBytes: Int, room: Int)
    }

    /// `cells` as one leaf page: raw when they fit one page; else, with `compress`, as a
    /// compressed leaf when its body fits the page (`scratch` holds the blocks meanwhile):
    /// in pieces (format 7), or as one block (format 4) without `inPieces` (tests of stores
    /// older builds wrote). The blocks hold the cells alone, each with its whole key, as a
    /// leaf of format 3 of their length lays them out (the last key's cell first): slots and
    /// hints are rebuilt from them when a leaf or a piece is expanded.
    /// Without `compress`, cells that do not fit are a caller's error.
    static func encodeLeafPage(cells: ArraySlice<CellToWrite>, id: PageID, generation: UInt64, pageBytes: Int,
                               compress: Bool, inPieces: Bool = true, scratch: inout [UInt8]) -> EncodedLeaf {
        if !compress || leafBytes(cells) <= hintedCapacity(pageBytes: pageBytes) {
            return .page(encodeLeaf(cells: cells, id: id, generation: generation, pageBytes: pageBytes), blockRatio: nil)
        }
        let total = cells.reduce(0) { $0 + $1.cellBytes }
        precondition(total <= maxExpandedCapacity(pageBytes: pageBytes), "a compressed leaf's cells overflow its expansion")
        let expanded = encodeLeaf(cells: cells, id: id, generation: generation, pageBytes: hintedSlotsStart + total, elide: false)
        let cellsStart = hintedSlotsStart + hintedSlotBytes * cells.count
        let cellBytes = expanded.count - cellsStart
        // Pieces in key order, each the cells from its first up to the one that would take
        // it past `pieceBytes` (a cell's bytes without its slot, which is not stored).
        var pieces: [Range<Int>] = []
        var start = cells.startIndex
        var used = 0
        if inPieces {
            for index in cells.indices {
                let bytes = cells[index].cellBytes - hintedSlotBytes
                if index > start && used + bytes > pieceBytes {
                    pieces.append(start..<index)
                    (start, used) = (index, 0)
                }
                used += bytes
            }
        }
        pieces.append(start..<cells.endIndex)
        let raw = pieces.map { piece in cells[piece].reduce(0) { $0 + $1.cellBytes - hintedSlotBytes } }
        // Each first key is stored as the bytes it shares with the one before, and the rest.
        let firstKeys = pieces.dropFirst().map { cells[$0.lowerBound].key }
        let shared = firstKeys.indices.map { index in
            index == 0 ? 0 : firstKeys[index - 1].withUnsafeBytes { before in firstKeys[index].withUnsafeBytes { commonPrefix(before, $0) } }
        }
        let separators = zip(firstKeys, shared).reduce(0) { $0 + varintBytes($1.1) + varintBytes($1.0.count - $1.1) + $1.0.count - $1.1 }
        let blocksStart = inPieces ? pieceEntriesStart + pieceEntryBytes * pieces.count + separators : compressedBlockStart
        let bound = raw.reduce(0) { $0 + LZ4Block.compressBound($1) }
        if scratch.count < bound { scratch = [UInt8](repeating: 0, count: bound) }
        // Piece j's cells lie in the expansion after those of every later piece.
        var blocks: [Int] = []
        var written = 0
        var end = expanded.count
        expanded.withUnsafeBytes { expanded in
            scratch.withUnsafeMutableBytes { scratch in
                for bytes in raw {
                    // A piece that does not compress is a block all the same (the leaf as a
                    // whole must save an eighth); one block must be smaller than the cells.
                    let block = LZ4Block.compress(UnsafeRawBufferPointer(rebasing: expanded[(end - bytes)..<end]),
                                                  into: UnsafeMutableRawBufferPointer(rebasing: scratch[written...]),
                                                  acceleration: leafAcceleration, allowingGrowth: inPieces)
                    guard let block else { return }
                    blocks.append(block)
                    written += block
                    end -= bytes
                }
            }
        }
        // Cells that do not compress by an eighth stay raw (split into pages they fit): a
        // raw leaf is read in place, a compressed one only through an expansion. They
        // count as taking their whole size, so the writer stops giving leaves more cells
        // than a page holds raw.
        let body = blocksStart - PageHeader.bytes + written
        let room = pageBytes - PageHeader.bytes
        guard blocks.count == pieces.count,
              body * compressionWorthwhile.denominator <= cellBytes * compressionWorthwhile.numerator else {
            let bodyBytes = blocks.count == pieces.count ? body : cellBytes
            return .tooLarge(blockRatio: max(1, Double(bodyBytes) / Double(cellBytes)), blockBytes: max(bodyBytes, cellBytes), room: room)
        }
        let ratio = Double(body) / Double(expanded.count - PageHeader.bytes)
        guard body <= room else { return .tooLarge(blockRatio: ratio, blockBytes: body, room: room) }
        var page = emptyPage(.leaf, id: id, generation: generation, count: cells.count, word: 0, pageBytes: pageBytes)
        page[leafFormatOffset] = inPieces ? piecedLeafFormat : compressedLeafFormat
        page.withUnsafeMutableBytes { page in
            page.storeBytes(of: UInt32(cellBytes).littleEndian, toByteOffset: PageHeader.bytes, as: UInt32.self)
            if inPieces {
                page.storeBytes(of: UInt16(pieces.count).littleEndian, toByteOffset: PageHeader.bytes + 4, as: UInt16.self)
                page.storeBytes(of: UInt16(blocksStart).littleEndian, toByteOffset: PageHeader.bytes + 6, as: UInt16.self)
                var at = pieceEntriesStart
                for (index, piece) in pieces.enumerated() {
                    for field in [piece.count, raw[index], blocks[index]] {
                        page.storeBytes(of: UInt16(field).littleEndian, toByteOffset: at, as: UInt16.self)
                        at += 2
                    }
                }
                for (key, shared) in zip(firstKeys, shared) {
                    ByteWriter.storeVarint(UInt64(shared), in: page, at: &at)
                    ByteWriter.storeVarint(UInt64(key.count - shared), in: page, at: &at)
                    for byte in key[shared...] {
                        page[at] = byte
                        at += 1
                    }
                }
                assert(at == blocksStart)
            } else {
                page.storeBytes(of: UInt32(written).littleEndian, toByteOffset: PageHeader.bytes + 4, as: UInt32.self)
            }
            scratch.withUnsafeBytes { scratch in
                (page.baseAddress! + blocksStart).copyMemory(from: scratch.baseAddress!, byteCount: written)
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

    /// The cell count and cell bytes of a compressed leaf's header and body, checked
    /// against the largest expansion (CompressedLeaf.C1).
    private static func expansionLengths(_ page: UnsafeRawBufferPointer, pageBytes: Int) throws(PageDefect) -> (count: Int, cellBytes: Int) {
        guard page.count == pageBytes, pageBytes > pieceEntriesStart else { throw PageDefect("its compressed body is truncated") }
        let count = Int(UInt16(littleEndian: page.loadUnaligned(fromByteOffset: 6, as: UInt16.self)))
        let cellBytes = Int(UInt32(littleEndian: page.loadUnaligned(fromByteOffset: PageHeader.bytes, as: UInt32.self)))
        let limit = maxExpandedLeafBytes(pageBytes: pageBytes)
        guard count > 0, cellBytes > 0, hintedSlotsStart + hintedSlotBytes * count + cellBytes <= limit else {
            throw PageDefect("its \(count) compressed cells claim \(cellBytes) bytes, more than a leaf of \(limit) bytes holds")
        }
        return (count, cellBytes)
    }

    /// `expandLeaf` into memory the caller then owns (and deallocates): what the page cache
    /// holds, made with one allocation and the cells decompressed in place.
    static func expandLeafIntoBuffer(_ page: UnsafeRawBufferPointer, pageBytes: Int) throws(PageDefect) -> UnsafeMutableRawBufferPointer {
        let (count, cellBytes) = try expansionLengths(page, pageBytes: pageBytes)
        let cellsStart = hintedSlotsStart + hintedSlotBytes * count
        if isPiecedLeaf(page) { return try expandPieces(page, pageBytes: pageBytes, count: count, cellBytes: cellBytes) }
        let blockBytes = Int(UInt32(littleEndian: page.loadUnaligned(fromByteOffset: PageHeader.bytes + 4, as: UInt32.self)))
        guard blockBytes > 0, blockBytes < cellBytes, compressedBlockStart + blockBytes <= pageBytes else {
            throw PageDefect("its LZ4 block claims \(blockBytes) bytes, more than the page or its cells hold")
        }
        try requireZeroTail(page, from: compressedBlockStart + blockBytes)
        let expanded = UnsafeMutableRawBufferPointer.allocate(byteCount: cellsStart + cellBytes, alignment: 16)
        do {
            try decompress(UnsafeRawBufferPointer(rebasing: page[compressedBlockStart..<(compressedBlockStart + blockBytes)]),
                           into: UnsafeMutableRawBufferPointer(rebasing: expanded[cellsStart...]), what: "its LZ4 block")
            try rebuildSlots(expanded, header: page, count: count, cellsStart: cellsStart)
        } catch {
            expanded.deallocate()
            throw error
        }
        return expanded
    }

    /// A page's bytes from `start` on must be zero.
    private static func requireZeroTail(_ page: UnsafeRawBufferPointer, from start: Int) throws(PageDefect) {
        // Eight bytes at a time, then the byte that is not zero found among them.
        var word = start
        while word + 8 <= page.count && page.loadUnaligned(fromByteOffset: word, as: UInt64.self) == 0 { word += 8 }
        for index in word..<page.count where page[index] != 0 {
            throw PageDefect("byte \(index), past its LZ4 blocks, is not zero")
        }
    }

    /// Decompresses `block` into exactly `cells`.
    @inline(__always)
    private static func decompress(_ block: UnsafeRawBufferPointer, into cells: UnsafeMutableRawBufferPointer,
                                   what: @autoclosure () -> String) throws(PageDefect) {
        do { try LZ4Block.decompress(block, into: cells) } catch {
            throw PageDefect("\(what()) does not expand to its \(cells.count) bytes of cells")
        }
    }

    /// Piece `index` of a pieced leaf, as its entry states it: its cells, their bytes and
    /// its block's bytes.
    @inline(__always)
    private static func pieceEntry(_ page: UnsafeRawBufferPointer, _ index: Int) -> (cells: Int, bytes: Int, block: Int) {
        let at = pieceEntriesStart + pieceEntryBytes * index
        return (Int(UInt16(littleEndian: page.loadUnaligned(fromByteOffset: at, as: UInt16.self))),
                Int(UInt16(littleEndian: page.loadUnaligned(fromByteOffset: at + 2, as: UInt16.self))),
                Int(UInt16(littleEndian: page.loadUnaligned(fromByteOffset: at + 4, as: UInt16.self))))
    }

    /// A pieced leaf's pieces and where its blocks start, checked against the page and its
    /// `count` cells.
    private static func pieceLayout(_ page: UnsafeRawBufferPointer, pageBytes: Int, count: Int) throws(PageDefect) -> (pieces: Int, blocksStart: Int) {
        let pieces = Int(UInt16(littleEndian: page.loadUnaligned(fromByteOffset: PageHeader.bytes + 4, as: UInt16.self)))
        let blocksStart = Int(UInt16(littleEndian: page.loadUnaligned(fromByteOffset: PageHeader.bytes + 6, as: UInt16.self)))
        guard pieces >= 1, pieces <= count, blocksStart >= pieceEntriesStart + pieceEntryBytes * pieces, blocksStart < pageBytes else {
            throw PageDefect("its \(pieces) pieces of \(count) cells have blocks at \(blocksStart)")
        }
        return (pieces, blocksStart)
    }

    /// The lengths of the stored first key of piece `piece` at `at` (before `end`), whose
    /// key before it is `previous` bytes long: the bytes it shares with that key (at most
    /// `previous`) and the length of the rest (the key 1 … 768 bytes in all), which follows
    /// at `at` when this returns.
    @inline(__always)
    private static func firstKeyLengths(_ page: UnsafeRawBufferPointer, at: inout Int, end: Int, piece: Int,
                                        previous: Int) throws(PageDefect) -> (shared: Int, rest: Int) {
        var shared: UInt64
        var rest: UInt64
        do {
            shared = try Varint.read(page, at: &at, end: end)
            rest = try Varint.read(page, at: &at, end: end)
        } catch {
            throw PageDefect("piece \(piece)'s first key does not decode: \(error)")
        }
        guard shared <= UInt64(previous), rest <= UInt64(Limits.maxKeyBytes), shared + rest > 0,
              shared + rest <= UInt64(Limits.maxKeyBytes), rest <= UInt64(end - at) else {
            throw PageDefect("piece \(piece)'s first key shares \(shared) bytes and adds \(rest)")
        }
        return (Int(shared), Int(rest))
    }

    /// Reads the stored first key of piece `piece` at `at` into `key`, which holds the key
    /// before it (`previous` bytes long), and moves `at` past it; returns its length.
    @inline(__always)
    private static func readFirstKey(_ page: UnsafeRawBufferPointer, at: inout Int, end: Int, piece: Int,
                                     into key: UnsafeMutableRawBufferPointer, previous: Int) throws(PageDefect) -> Int {
        let (shared, rest) = try firstKeyLengths(page, at: &at, end: end, piece: piece, previous: previous)
        (key.baseAddress! + shared).copyMemory(from: page.baseAddress! + at, byteCount: rest)
        at += rest
        return shared + rest
    }

    /// The whole expansion of a pieced leaf of `count` cells and `cellBytes` bytes of cells
    /// (CompressedLeaf.C1 to C3): every entry, first key and block checked, piece j's cells
    /// decompressed after those of every later piece, the slots rebuilt, and each stored
    /// first key compared with its piece's.
    private static func expandPieces(_ page: UnsafeRawBufferPointer, pageBytes: Int, count: Int,
                                     cellBytes: Int) throws(PageDefect) -> UnsafeMutableRawBufferPointer {
        let (pieces, blocksStart) = try pieceLayout(page, pageBytes: pageBytes, count: count)
        var (cells, bytes, blocks) = (0, 0, 0)
        for index in 0..<pieces {
            let entry = pieceEntry(page, index)
            guard entry.cells > 0, entry.bytes > 0, entry.block > 0 else { throw PageDefect("piece \(index) is empty") }
            (cells, bytes, blocks) = (cells + entry.cells, bytes + entry.bytes, blocks + entry.block)
        }
        guard cells == count, bytes == cellBytes, blocksStart + blocks <= pageBytes else {
            throw PageDefect("its pieces hold \(cells) cells in \(bytes) bytes and blocks to \(blocksStart + blocks), not its \(count) cells in \(cellBytes)")
        }
        try requireZeroTail(page, from: blocksStart + blocks)
        let cellsStart = hintedSlotsStart + hintedSlotBytes * count
        let expanded = UnsafeMutableRawBufferPointer.allocate(byteCount: cellsStart + cellBytes, alignment: 16)
        do throws(PageDefect) {
            var block = blocksStart
            var end = expanded.count
            for index in 0..<pieces {
                let entry = pieceEntry(page, index)
                try decompress(UnsafeRawBufferPointer(rebasing: page[block..<(block + entry.block)]),
                               into: UnsafeMutableRawBufferPointer(rebasing: expanded[(end - entry.bytes)..<end]),
                               what: "piece \(index)'s LZ4 block")
                block += entry.block
                end -= entry.bytes
            }
            try rebuildSlots(expanded, header: page, count: count, cellsStart: cellsStart)
            // Each stored first key, read over the one before it, against its piece's.
            let key = UnsafeMutableRawBufferPointer.allocate(byteCount: Limits.maxKeyBytes, alignment: 8)
            defer { key.deallocate() }
            var at = pieceEntriesStart + pieceEntryBytes * pieces
            var length = 0
            var first = 0
            for index in 1..<max(1, pieces) {
                first += pieceEntry(page, index - 1).cells
                length = try readFirstKey(page, at: &at, end: blocksStart, piece: index, into: key, previous: length)
                try requireFirstKey(UnsafeRawBufferPointer(expanded), slot: first, is: UnsafeRawBufferPointer(rebasing: key[..<length]), piece: index)
            }
            guard at == blocksStart else { throw PageDefect("its first keys end at \(at), not at its blocks' start \(blocksStart)") }
        } catch {
            expanded.deallocate()
            throw error
        }
        return expanded
    }

    /// The key of slot `slot` of an expansion must be `key`, piece `piece`'s stored first
    /// key (CompressedLeaf.C3).
    @inline(__always)
    private static func requireFirstKey(_ expanded: UnsafeRawBufferPointer, slot: Int, is key: UnsafeRawBufferPointer,
                                        piece: Int) throws(PageDefect) {
        var at = Int(UInt16(littleEndian: expanded.loadUnaligned(fromByteOffset: hintedSlotsStart + hintedSlotBytes * slot, as: UInt16.self)))
        // Slots were rebuilt from a walk that checked every key's length within the cells.
        let length = Int((try? Varint.read(expanded, at: &at, end: expanded.count)) ?? 0)
        guard compareBytes(UnsafeRawBufferPointer(rebasing: expanded[at..<(at + length)]), key) == 0 else {
            throw PageDefect("piece \(piece)'s stored first key is not its first cell's")
        }
    }

    /// Calls `body` with the cell for `key` (a tombstone included), or nil, in the verified
    /// pieced leaf `page`: a point read's search, without the whole leaf's expansion. The
    /// piece that would hold `key` (the last whose first key is at most `key`) is
    /// decompressed and its cells walked once, as an expansion walks them (CompressedLeaf.C1
    /// to C3); no slots are built. The cell found is handed out from a leaf of that one cell.
    static func withPieceCell<Result>(of page: UnsafeRawBufferPointer, pageBytes: Int, for key: UnsafeRawBufferPointer,
                                      _ body: (LeafCell?) throws -> Result) throws -> Result {
        let (count, cellBytes) = try expansionLengths(page, pageBytes: pageBytes)
        let (pieces, blocksStart) = try pieceLayout(page, pageBytes: pageBytes, count: count)
        // The chosen piece's first key, each next one compared with `key` before it is read
        // over it: every one read so far was at most `key`, so the one before the next is
        // always the chosen one.
        return try withUnsafeTemporaryAllocation(byteCount: Limits.maxKeyBytes, alignment: 8) { first in
            var at = pieceEntriesStart + pieceEntryBytes * pieces
            var (piece, block, firstLength) = (0, blocksStart, 0)
            for index in 1..<max(1, pieces) {
                let (shared, rest) = try firstKeyLengths(page, at: &at, end: blocksStart, piece: index, previous: firstLength)
                let restBytes = UnsafeRawBufferPointer(rebasing: page[at..<(at + rest)])
                at += rest
                // The next key against `key`: the bytes it shares with the chosen one, then the rest.
                let head = min(shared, key.count)
                var order = compareBytes(UnsafeRawBufferPointer(rebasing: first[..<head]), UnsafeRawBufferPointer(rebasing: key[..<head]))
                if order == 0 { order = key.count < shared ? 1 : compareBytes(restBytes, UnsafeRawBufferPointer(rebasing: key[shared...])) }
                guard order <= 0 else { break }
                (first.baseAddress! + shared).copyMemory(from: restBytes.baseAddress!, byteCount: rest)
                firstLength = shared + rest
                block += pieceEntry(page, piece).block
                piece = index
            }
            let entry = pieceEntry(page, piece)
            guard entry.cells > 0, entry.cells <= count, entry.bytes > 0, entry.bytes <= cellBytes, entry.block > 0,
                  block + entry.block <= pageBytes else {
                throw PageDefect("piece \(piece) claims \(entry.cells) cells in \(entry.bytes) bytes and a block of \(entry.block) at \(block)")
            }
            // A leaf of one slot: the cells go after it, and the slot names the one found.
            // On the stack where it fits (a piece is about 1 KiB), so a read allocates nothing.
            let cellsStart = hintedSlotsStart + hintedSlotBytes
            return try withUnsafeTemporaryAllocation(byteCount: cellsStart + entry.bytes, alignment: 16) { leaf in
                try decompress(UnsafeRawBufferPointer(rebasing: page[block..<(block + entry.block)]),
                               into: UnsafeMutableRawBufferPointer(rebasing: leaf[cellsStart...]), what: "piece \(piece)'s LZ4 block")
                let bytes = UnsafeRawBufferPointer(leaf)
                var found: Int?
                var pieceFirst = 0..<0
                try walkCells(bytes, from: cellsStart, count: entry.cells) { index, cell, cellKey throws(PageDefect) in
                    if found == nil && compareBytes(UnsafeRawBufferPointer(rebasing: bytes[cellKey]), key) == 0 { found = cell }
                    if index == 0 { pieceFirst = cellKey }
                }
                if piece > 0 && compareBytes(UnsafeRawBufferPointer(rebasing: bytes[pieceFirst]), UnsafeRawBufferPointer(rebasing: first[..<firstLength])) != 0 {
                    throw PageDefect("piece \(piece)'s stored first key is not its first cell's")
                }
                guard let found else { return try body(nil) }
                writeHeader(leaf, from: page, count: 1)
                leaf.storeBytes(of: UInt16(0), toByteOffset: PageHeader.bytes, as: UInt16.self)
                leaf.storeBytes(of: UInt16(found).littleEndian, toByteOffset: hintedSlotsStart, as: UInt16.self)
                leaf.storeBytes(of: UInt32(0), toByteOffset: hintedSlotsStart + 2, as: UInt32.self)
                return try body(TreePage(bytes: bytes, type: .leaf, count: 1, word: 0).leafCell(0))
            }
        }
    }

    /// Writes the header, hint offset and slots of an expansion of `count` cells whose cells
    /// were decompressed at `cellsStart`, from a walk of the cells that stays within them:
    /// the header is `header`'s with byte 5 set to format 3's and its count to `count`.
    private static func rebuildSlots(_ expanded: UnsafeMutableRawBufferPointer, header page: UnsafeRawBufferPointer, count: Int,
                                     cellsStart: Int) throws(PageDefect) {
        writeHeader(expanded, from: page, count: count)
        let bytes = UnsafeRawBufferPointer(expanded)
        var firstKey = 0..<0
        var lastKey = 0..<0
        // Each slot's offset is stored as its cell is reached, and where its key lies in
        // the hint's place (its start in the low 16 bits, its length in the high: the
        // cells end within 64 KiB), which the hint replaces once the prefix is known.
        try walkCells(bytes, from: cellsStart, count: count) { index, cell, key throws(PageDefect) in
            let slot = hintedSlotsStart + hintedSlotBytes * index
            expanded.storeBytes(of: UInt16(cell).littleEndian, toByteOffset: slot, as: UInt16.self)
            expanded.storeBytes(of: UInt32(key.lowerBound) | UInt32(key.count) << 16, toByteOffset: slot + 2, as: UInt32.self)
            if index == count - 1 { lastKey = key }
            if index == 0 { firstKey = key }
        }
        // The hint offset is the first and last keys' common prefix (FORMAT.md, "Hints").
        let prefix = commonPrefix(UnsafeRawBufferPointer(rebasing: bytes[firstKey]), UnsafeRawBufferPointer(rebasing: bytes[lastKey]))
        expanded.storeBytes(of: UInt16(prefix).littleEndian, toByteOffset: PageHeader.bytes, as: UInt16.self)
        for index in 0..<count {
            let slot = hintedSlotsStart + hintedSlotBytes * index
            let key = bytes.loadUnaligned(fromByteOffset: slot + 2, as: UInt32.self)
            let keyStart = Int(key & 0xFFFF)
            let hint = hint(of: UnsafeRawBufferPointer(rebasing: bytes[keyStart..<(keyStart + Int(key >> 16))]), at: prefix)
            expanded.storeBytes(of: hint.bigEndian, toByteOffset: slot + 2, as: UInt32.self)
        }
    }

    /// An expansion's header: `header`'s with byte 5 set to format 3's and its count to `count`.
    @inline(__always)
    private static func writeHeader(_ expanded: UnsafeMutableRawBufferPointer, from page: UnsafeRawBufferPointer, count: Int) {
        expanded.copyMemory(from: UnsafeRawBufferPointer(rebasing: page[..<PageHeader.bytes]))
        expanded[leafFormatOffset] = hintedLeafFormat
        expanded.storeBytes(of: UInt16(count).littleEndian, toByteOffset: 6, as: UInt16.self)
    }

    /// `Varint.read`, its short forms (a cell's lengths, most versions) read in line: both
    /// `Varint` functions stayed calls from the walk (perf showed each as a symbol of its
    /// own), so the one-byte form is tested here and `readShort` called before `read`, which
    /// calls it again only for one it cannot read (four bytes or more, or malformed).
    @inline(__always)
    private static func readVarint(_ bytes: UnsafeRawBufferPointer, at offset: inout Int, end: Int) throws(CodecError) -> UInt64 {
        if offset < end, bytes[offset] < 0x80 {
            offset += 1
            return UInt64(bytes[offset - 1])
        }
        if let value = Varint.readShort(bytes, at: &offset, end: end) { return value }
        return try Varint.read(bytes, at: &offset, end: end)
    }

    /// Walks the `count` cells that lie from `start` to the end of `bytes`, last key first
    /// (the k-th from the start is cell count - 1 - k), each within them as FORMAT.md's
    /// "Leaf cell" reads it, calling `visit` with the cell's index, where it starts and
    /// where its key lies. They must end exactly at the end of `bytes`.
    @inline(__always)
    private static func walkCells(_ bytes: UnsafeRawBufferPointer, from start: Int, count: Int,
                                  _ visit: (_ index: Int, _ cell: Int, _ key: Range<Int>) throws(PageDefect) -> Void) throws(PageDefect) {
        let end = bytes.count
        var at = start
        do {
            for index in (0..<count).reversed() {
                guard at < end else { throw PageDefect("its cells end before cell \(index)") }
                let cell = at
                let keyVarint = try readVarint(bytes, at: &at, end: end)
                guard keyVarint > 0, keyVarint <= UInt64(Limits.maxKeyBytes), keyVarint <= UInt64(end - at) else {
                    throw PageDefect("cell \(index) has a key of \(keyVarint) bytes")
                }
                let keyLength = Int(keyVarint)
                try visit(index, cell, at..<(at + keyLength))
                at += keyLength
                _ = try readVarint(bytes, at: &at, end: end)
                guard at < end else { throw PageDefect("cell \(index) ends before its flags") }
                let flags = bytes[at]
                at += 1
                // A value in line first: most cells hold one (a branch, not a jump table).
                if flags == 0 {
                    let valueLength = try readVarint(bytes, at: &at, end: end)
                    guard valueLength <= UInt64(end - at) else { throw PageDefect("cell \(index) has a value past its leaf") }
                    at += Int(valueLength)
                } else if flags == overflowFlag || flags == runFlag {
                    let size = flags == runFlag ? 20 : 12
                    guard end - at >= size else { throw PageDefect("cell \(index) has an overflow reference past its leaf") }
                    at += size
                } else if flags != tombstoneFlag {
                    throw PageDefect("cell \(index) has flags \(flags)")
                }
            }
        } catch let defect as PageDefect {
            throw defect
        } catch {
            throw PageDefect("its compressed cells do not decode: \(error)")
        }
        guard at == end else { throw PageDefect("its block holds \(end - at) bytes after its \(count) cells") }
    }
}

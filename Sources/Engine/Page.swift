// The encodings of B+tree, overflow and free-list pages (FORMAT.md, "Page file").
//
// Every page starts with a 32-byte header: CRC-32C of bytes 4..<pageBytes, type, count,
// its own page ID, the checkpoint generation that wrote it, and one type-specific word.
// Decoders check the checksum first, then the type and ID (a misdirected write shows up
// as the wrong ID), then every slot, length and key order against the page's bounds.
import StrataCodec

/// The common page header.
enum PageHeader {
    static let bytes = 32
}

/// A value as a leaf stores it.
enum Payload: Equatable, Sendable {
    /// Stored in the leaf cell.
    case inline([UInt8])
    /// Stored in overflow pages (OverflowRun.swift).
    case overflow(LargeValue)
    /// The key was deleted at this entry's version (kept for conflict detection).
    case tombstone
}

/// One key of a leaf: its value and the version that wrote it.
struct LeafEntry: Equatable, Sendable {
    var key: [UInt8]
    var version: UInt64
    var payload: Payload

    /// Bytes the entry takes in a leaf, its slot included.
    var cellBytes: Int {
        switch payload {
        case let .inline(value): Self.cellBytes(keyCount: key.count, version: version, inlineValueCount: value.count)
        case let .overflow(value): Self.cellBytes(keyCount: key.count, version: version, inlineValueCount: nil) + value.referenceBytes
        case .tombstone: Self.cellBytes(keyCount: key.count, version: version, inlineValueCount: nil)
        }
    }

    /// Bytes of a leaf cell with its slot: an inline value of `inlineValueCount` bytes, or
    /// (nil) a tombstone.
    static func cellBytes(keyCount: Int, version: UInt64, inlineValueCount: Int?) -> Int {
        let base = PageCodec.hintedSlotBytes + varintBytes(keyCount) + keyCount + varintBytes(version) + 1
        guard let inlineValueCount else { return base }
        return base + varintBytes(inlineValueCount) + inlineValueCount
    }
}

/// A cell for a leaf being written: an entry of a leaf read from the file, or a change
/// read in place from a memtable node (its value inline, or none for a tombstone), so the
/// checkpoint copies no key or value of the memtable it folds before encoding it.
enum CellToWrite {
    case entry(LeafEntry)
    case node(MemtableNode)
    /// A cell kept from a leaf the writer read, copied from that leaf's bytes.
    case stored(StoredCell)

    var cellBytes: Int {
        switch self {
        case let .entry(entry): entry.cellBytes
        case let .node(node): LeafEntry.cellBytes(keyCount: node.key.count, version: node.version, inlineValueCount: node.value?.count)
        case let .stored(cell): cell.cellBytes
        }
    }

    var key: [UInt8] {
        switch self {
        case let .entry(entry): entry.key
        case let .node(node): Array(node.key)
        case let .stored(cell): cell.withKey { Array($0) }
        }
    }

    /// Calls `body` with the key's bytes, borrowed.
    @inline(__always)
    func withKey<Result>(_ body: (UnsafeRawBufferPointer) throws -> Result) rethrows -> Result {
        switch self {
        case let .entry(entry): try entry.key.withUnsafeBytes(body)
        case let .node(node): try body(node.key)
        case let .stored(cell): try cell.withKey(body)
        }
    }

    /// The bytes of this cell's key.
    var keyCount: Int {
        switch self {
        case let .entry(entry): entry.key.count
        case let .node(node): node.key.count
        case let .stored(cell): cell.keyCount
        }
    }
}

/// One child of a branch: every key in it is at or above `key` (the leftmost child's key
/// is not stored).
struct BranchEntry: Equatable, Sendable {
    var key: [UInt8]
    var child: PageID

    var cellBytes: Int { PageCodec.hintedSlotBytes + varintBytes(key.count) + key.count + 8 }
}

/// A decoded B+tree page.
enum Node: Sendable {
    case leaf([LeafEntry])
    case branch([BranchEntry])
}

enum PageCodec {
    /// Header byte 5 of a leaf: how its cells store versions. 0 (format 1): eight bytes,
    /// little-endian; 1 (`varintVersions`, format 2 on): a varint. Bit 1 (`hintedSlots`,
    /// format 3 on, leaves and branches): its slots carry hints (see "Hints"). Bit 3
    /// (`elidedPrefix`, format 6, raw leaves): the prefix every key of the leaf shares is
    /// stored once, before the slots, and left out of every cell (see "Elided prefixes").
    static let leafFormatOffset = 5
    static let varintVersions: UInt8 = 1
    static let hintedSlots: UInt8 = 2
    static let elidedPrefix: UInt8 = 8
    /// A leaf of format 3, as the expansion of a compressed leaf also is.
    static let hintedLeafFormat = varintVersions | hintedSlots
    /// A raw leaf's header byte 5 as this build writes it.
    static let currentLeafFormat = hintedLeafFormat | elidedPrefix
    /// Bytes of a hinted slot: the cell's offset, then the hint of its key.
    static let hintedSlotBytes = 6
    /// Where a hinted page's slots start: after the header and its 2-byte hint offset.
    static let hintedSlotsStart = PageHeader.bytes + 2
    /// Bytes a hinted page has for cells and slots.
    static func hintedCapacity(pageBytes: Int) -> Int { pageBytes - hintedSlotsStart }

    /// Whether `entries` fit one leaf of the current format. A leaf of format 1 or 2 (plain
    /// 2-byte slots) may hold more than one of format 3 (6-byte hinted slots) can.
    static func leafFits(_ entries: [LeafEntry], pageBytes: Int) -> Bool {
        leafBytes(entries.map(CellToWrite.entry)[...]) <= hintedCapacity(pageBytes: pageBytes)
    }

    /// The bytes `cells` take after a raw leaf's hint offset: their slots and cells, their
    /// keys without the prefix they all share, and that prefix once.
    static func leafBytes(_ cells: ArraySlice<CellToWrite>) -> Int {
        let prefix = sharedPrefix(cells)
        var total = prefix
        for cell in cells {
            let keyCount = cell.keyCount
            total += cell.cellBytes - varintBytes(keyCount) - prefix + varintBytes(keyCount - prefix)
        }
        return total
    }

    /// The prefix every key of `cells` shares: their first and last keys' common prefix,
    /// as they are in key order (0 for no cell).
    static func sharedPrefix(_ cells: ArraySlice<CellToWrite>) -> Int {
        guard let first = cells.first, let last = cells.last else { return 0 }
        return first.withKey { first in last.withKey { last in commonPrefix(first, last) } }
    }

    /// The length of the common prefix of `a` and `b`.
    static func commonPrefix(_ a: UnsafeRawBufferPointer, _ b: UnsafeRawBufferPointer) -> Int {
        let limit = min(a.count, b.count)
        var length = 0
        while length + 8 <= limit
                && a.loadUnaligned(fromByteOffset: length, as: UInt64.self) == b.loadUnaligned(fromByteOffset: length, as: UInt64.self) {
            length += 8
        }
        while length < limit && a[length] == b[length] { length += 1 }
        return length
    }

    /// Whether `entries` (the first one's key not stored) fit one branch of the current
    /// format.
    static func branchFits(_ entries: some Collection<BranchEntry>, pageBytes: Int) -> Bool {
        entries.dropFirst().reduce(0) { $0 + $1.cellBytes } <= hintedCapacity(pageBytes: pageBytes)
    }
    static let tombstoneFlag: UInt8 = 1
    static let overflowFlag: UInt8 = 2

    /// A page with its header filled in and its body empty.
    static func emptyPage(_ type: PageType, id: PageID, generation: UInt64, count: Int, word: UInt64,
                          pageBytes: Int) -> [UInt8] {
        var writer = ByteWriter(capacity: pageBytes)
        writer.write(UInt32(0))
        writer.write(type.rawValue)
        writer.write(UInt8(0))
        writer.write(UInt16(count))
        writer.write(id.rawValue)
        writer.write(generation)
        writer.write(word)
        writer.writeZeros(pageBytes - writer.count)
        return writer.bytes
    }

    /// Writes the checksum of a finished page into its first four bytes.
    static func seal(_ page: inout [UInt8]) {
        let checksum = page.withUnsafeBytes { CRC32C.extend(0, UnsafeRawBufferPointer(rebasing: $0[4...])) }
        withUnsafeBytes(of: checksum.littleEndian) { for index in 0..<4 { page[index] = $0[index] } }
    }

    /// Checks the checksum, type and ID of a page read from disk; returns its count and word.
    static func verify(_ page: [UInt8], id: PageID, expected types: PageTypes) throws(PageDefect) -> (PageType, Int, UInt64) {
        do {
            return try page.withUnsafeBytes { try verify($0, id: id, expected: types) }
        } catch let defect as PageDefect {
            throw defect
        } catch {
            throw PageDefect("\(error)")
        }
    }

    static func verify(_ page: UnsafeRawBufferPointer, id: PageID, expected types: PageTypes) throws(PageDefect) -> (PageType, Int, UInt64) {
        guard page.count >= PageHeader.bytes else { throw PageDefect("its header is truncated") }
        let stored = UInt32(littleEndian: page.loadUnaligned(as: UInt32.self))
        let computed = CRC32C.extend(0, UnsafeRawBufferPointer(rebasing: page[4...]))
        guard stored == computed else { throw PageDefect("its checksum does not match") }
        guard let type = PageType(rawValue: page[4]), types.contains(type) else {
            throw PageDefect("it has type \(page[4]), expected \(types.rawValues)")
        }
        // Byte 5 says how a leaf stores versions and slots (and whether its body is
        // compressed), and whether a branch's slots carry hints; it is zero in every other page.
        let format = page[leafFormatOffset]
        guard format == 0 || (type == .leaf && (format == varintVersions || format == hintedLeafFormat || format == currentLeafFormat
                                                || format == compressedLeafFormat || format == piecedLeafFormat))
                || (type == .branch && format == hintedSlots) || (type == .overflow && format == compressedChain) else {
            throw PageDefect("its header byte 5 is \(page[leafFormatOffset])")
        }
        let storedID = UInt64(littleEndian: page.loadUnaligned(fromByteOffset: 8, as: UInt64.self))
        guard storedID == id.rawValue else { throw PageDefect("it says it is page \(storedID)") }
        let count = Int(UInt16(littleEndian: page.loadUnaligned(fromByteOffset: 6, as: UInt16.self)))
        let word = UInt64(littleEndian: page.loadUnaligned(fromByteOffset: 24, as: UInt64.self))
        // An overflow page counts nothing and a leaf links nowhere: both fields are zero.
        guard type != .overflow || count == 0 else { throw PageDefect("its count is \(count), not zero as an overflow page's") }
        guard type != .leaf || word == 0 else { throw PageDefect("its header word is \(word), not zero as a leaf's") }
        return (type, count, word)
    }

    // MARK: Leaves

    static func encodeLeaf(_ entries: ArraySlice<LeafEntry>, id: PageID, generation: UInt64, pageBytes: Int) -> [UInt8] {
        encodeLeaf(cells: entries.map(CellToWrite.entry)[...], id: id, generation: generation, pageBytes: pageBytes)
    }

    /// A raw leaf of `cells` in `pageBytes`, the prefix its keys share stored once. With
    /// `elide: false`, a leaf of format 3, whole keys in every cell, without its checksum:
    /// the layout a compressed leaf's block holds (CompressedLeaf.swift).
    /// Cells are written in place from the end of the page down.
    static func encodeLeaf(cells: ArraySlice<CellToWrite>, id: PageID, generation: UInt64, pageBytes: Int,
                           elide: Bool = true) -> [UInt8] {
        let count = cells.count
        var page = emptyPage(.leaf, id: id, generation: generation, count: count, word: 0, pageBytes: pageBytes)
        page[leafFormatOffset] = elide ? currentLeafFormat : hintedLeafFormat
        let prefix = sharedPrefix(cells)
        let elided = elide ? prefix : 0
        page.withUnsafeMutableBytes { page in
            let slots = hintedSlotsStart + elided
            if elide, let first = cells.first {
                first.withKey { key in (page.baseAddress! + hintedSlotsStart).copyMemory(from: key.baseAddress!, byteCount: elided) }
            }
            var end = pageBytes
            for (index, cell) in cells.enumerated() {
                let keyCount = cell.keyCount
                end -= cell.cellBytes - hintedSlotBytes - elided - varintBytes(keyCount) + varintBytes(keyCount - elided)
                precondition(end >= slots + hintedSlotBytes * count, "leaf cells overflow the page")
                var writer = CellWriter(page, at: end)
                switch cell {
                case let .entry(entry):
                    writer.write(entry, elided: elided)
                case let .stored(cell):
                    writer.write(cell, elided: elided)
                case let .node(node):
                    writer.writeVarint(UInt64(keyCount - elided))
                    writer.write(UnsafeRawBufferPointer(rebasing: node.key[elided...]))
                    writer.writeVarint(node.version)
                    if let value = node.value {
                        writer.write(UInt8(0))
                        writer.writeVarint(UInt64(value.count))
                        writer.write(value)
                    } else {
                        writer.write(tombstoneFlag)
                    }
                }
                page.storeBytes(of: UInt16(end).littleEndian, toByteOffset: slots + hintedSlotBytes * index, as: UInt16.self)
                let keyHint = cell.withKey { PageCodec.hint(of: $0, at: prefix) }
                page.storeBytes(of: keyHint.bigEndian, toByteOffset: slots + hintedSlotBytes * index + 2, as: UInt32.self)
            }
            page.storeBytes(of: UInt16(prefix).littleEndian, toByteOffset: PageHeader.bytes, as: UInt16.self)
        }
        if !elide { return page }
        seal(&page)
        return page
    }

    // MARK: Hints

    // A hinted page's keys all share their first `h` bytes, h being the length of the
    // common prefix of its first and last keys (stored in bytes 32–33). The hint of
    // a key is its four bytes from h on, zero-padded past its end, as a big-endian number:
    // among keys sharing those h bytes, hints are in key order (a smaller hint is a smaller
    // key; equal hints say nothing), so a binary search compares hints in the slots and
    // reads a cell only where two hints tie — one cache line instead of one per probe.

    /// The hint of `key` at offset `start` (FORMAT.md, "Leaf and branch pages").
    @inline(__always)
    static func hint(of key: UnsafeRawBufferPointer, at start: Int) -> UInt32 {
        if start + 4 <= key.count {
            return UInt32(bigEndian: key.loadUnaligned(fromByteOffset: start, as: UInt32.self))
        }
        var hint: UInt32 = 0
        for index in start..<(start + 4) { hint = hint << 8 | UInt32(index < key.count ? key[index] : 0) }
        return hint
    }

    /// The hint in slot `index` of a hinted page whose slot array, from `slots`, fits the page.
    @inline(__always)
    static func slotHint(_ page: UnsafeRawBufferPointer, slots: Int, index: Int) -> UInt32 {
        UInt32(bigEndian: page.loadUnaligned(fromByteOffset: slots + hintedSlotBytes * index + 2, as: UInt32.self))
    }

    /// The hint offset a hinted page stores (not checked against its keys; clamped to the
    /// longest key, so a crafted one gives wrong hints, never a wild read).
    @inline(__always)
    static func storedHintOffset(_ page: UnsafeRawBufferPointer) -> Int {
        min(Int(UInt16(littleEndian: page.loadUnaligned(fromByteOffset: PageHeader.bytes, as: UInt16.self))), Limits.maxKeyBytes)
    }

    /// The hint offset a page of `count` keys stores: its first and last keys' common prefix.
    static func hintOffset(_ page: UnsafeRawBufferPointer, count: Int) throws(PageDefect) -> Int {
        guard count > 0 else { return 0 }
        let (firstStart, firstLength) = try keyLocation(page, index: 0, count: count)
        let (lastStart, lastLength) = try keyLocation(page, index: count - 1, count: count)
        var length = 0
        let limit = min(firstLength, lastLength)
        while length < limit && page[firstStart + length] == page[lastStart + length] { length += 1 }
        return length
    }

    /// Fills in the hint offset and every slot's hint of a hinted page whose cells and
    /// offsets are written.
    private static func writeHints(_ bytes: UnsafeRawBufferPointer, into page: UnsafeMutableRawBufferPointer, count: Int) {
        let offset = try! hintOffset(bytes, count: count)
        page.storeBytes(of: UInt16(offset).littleEndian, toByteOffset: PageHeader.bytes, as: UInt16.self)
        for index in 0..<count {
            let (start, length) = try! keyLocation(bytes, index: index, count: count)
            let hint = hint(of: UnsafeRawBufferPointer(rebasing: bytes[start..<(start + length)]), at: offset)
            page.storeBytes(of: hint.bigEndian, toByteOffset: hintedSlotsStart + hintedSlotBytes * index + 2, as: UInt32.self)
        }
    }

    /// Checks a hinted page's hint offset and hints against its keys (`verify`, checkpoints:
    /// a lookup trusts them, as it trusts key order). In a page that elides its keys'
    /// prefix, the cells hold the keys from the hint offset on: the first and last of them
    /// share no byte, and a hint is taken from a cell's key at 0.
    static func checkHints(_ page: UnsafeRawBufferPointer, count: Int) throws(PageDefect) {
        guard page[leafFormatOffset] & hintedSlots != 0 else { return }
        let stored = Int(UInt16(littleEndian: page.loadUnaligned(fromByteOffset: PageHeader.bytes, as: UInt16.self)))
        let elided = page[leafFormatOffset] & elidedPrefix != 0
        if elided {
            guard stored <= Limits.maxKeyBytes else { throw PageDefect("its keys' shared prefix of \(stored) bytes is longer than a key") }
            let shared = try hintOffset(page, count: count)
            guard shared == 0 else { throw PageDefect("its hint offset is \(stored), not \(stored + shared)") }
        } else {
            let offset = try hintOffset(page, count: count)
            guard stored == offset else { throw PageDefect("its hint offset is \(stored), not \(offset)") }
        }
        let slots = slotLayout(page).start
        for index in 0..<count {
            let (start, length) = try keyLocation(page, index: index, count: count)
            let key = UnsafeRawBufferPointer(rebasing: page[start..<(start + length)])
            guard elided ? stored + length <= Limits.maxKeyBytes : true else {
                throw PageDefect("cell \(index) has a key of \(stored + length) bytes")
            }
            guard slotHint(page, slots: slots, index: index) == hint(of: key, at: elided ? 0 : stored) else {
                throw PageDefect("slot \(index) has a hint that is not its key's")
            }
        }
    }

    /// `checkHints` of a page held in an array (`withUnsafeBytes` rethrows untyped).
    static func checkHints(_ page: [UInt8], count: Int) throws(PageDefect) {
        do {
            try page.withUnsafeBytes { try checkHints($0, count: count) }
        } catch let defect as PageDefect {
            throw defect
        } catch {
            throw PageDefect("\(error)")
        }
    }

    static func decodeLeaf(_ page: [UInt8], count: Int) throws(PageDefect) -> [LeafEntry] {
        try checkHints(page, count: count)
        var entries: [LeafEntry] = []
        entries.reserveCapacity(count)
        for index in 0..<count {
            let entry = try decodeLeafCell(page, index: index, count: count)
            if let previous = entries.last, compareKeys(previous.key, entry.key) >= 0 {
                throw PageDefect("cell \(index) is out of key order")
            }
            entries.append(entry)
        }
        return entries
    }

    /// Decodes leaf cell `index` alone.
    static func decodeLeafCell(_ page: [UInt8], index: Int, count: Int) throws(PageDefect) -> LeafEntry {
        var reader = try cellReader(page, index: index, count: count)
        do {
            let stored = try reader.readLength(limit: Limits.maxKeyBytes)
            let key: [UInt8]
            if page[leafFormatOffset] & elidedPrefix != 0 {
                // The prefix the page stores once, then the rest of the key.
                let prefix = page.withUnsafeBytes { storedHintOffset($0) }
                guard prefix + stored <= Limits.maxKeyBytes else { throw PageDefect("cell \(index) has a key of \(prefix + stored) bytes") }
                let start = reader.offset
                try reader.skip(stored)
                var whole: [UInt8] = []
                whole.reserveCapacity(prefix + stored)
                whole += page[hintedSlotsStart..<(hintedSlotsStart + prefix)]
                whole += page[start..<(start + stored)]
                key = whole
            } else {
                key = try reader.readBytes(count: stored)
            }
            let version = try page[leafFormatOffset] & varintVersions != 0 ? reader.readVarint() : reader.readUInt64()
            let flags = try reader.readUInt8()
            let payload: Payload
            switch flags {
            case 0: payload = .inline(try reader.readBytes(count: try reader.readLength(limit: page.count)))
            case overflowFlag, runFlag:
                let byteCount = try reader.readUInt32()
                let first = try reader.readUInt64()
                let (stored, checksum) = flags == runFlag ? (try reader.readUInt32(), try reader.readUInt32()) : (0, 0)
                payload = .overflow(try largeValue(flags, byteCount: byteCount, first: first, stored: stored, checksum: checksum, cell: index))
            case tombstoneFlag: payload = .tombstone
            default: throw PageDefect("cell \(index) has flags \(flags)")
            }
            return LeafEntry(key: key, version: version, payload: payload)
        } catch let defect as PageDefect {
            throw defect
        } catch {
            throw PageDefect("cell \(index) does not decode: \(error)")
        }
    }

    /// Where cell `index`'s key lies in the page: its first byte and its length. Checks the
    /// slot and the length against the page's bounds.
    /// Inlined: it runs once per probe of every binary search in a page.
    @inline(__always)
    static func keyLocation(_ page: UnsafeRawBufferPointer, index: Int, count: Int) throws(PageDefect) -> (start: Int, length: Int) {
        try CellLayout(page, count: count).keyLocation(page, index: index)
    }

    // MARK: Branches

    /// Encodes a branch; `entries[0].key` is not stored (the leftmost child takes every
    /// key below `entries[1].key`).
    static func encodeBranch(_ entries: ArraySlice<BranchEntry>, id: PageID, generation: UInt64, pageBytes: Int) -> [UInt8] {
        precondition(!entries.isEmpty, "a branch needs a child")
        let cells = entries.dropFirst()
        var page = emptyPage(.branch, id: id, generation: generation, count: cells.count,
                             word: entries.first!.child.rawValue, pageBytes: pageBytes)
        page[leafFormatOffset] = hintedSlots
        page.withUnsafeMutableBytes { page in
            var end = pageBytes
            for (index, entry) in cells.enumerated() {
                end -= entry.cellBytes - hintedSlotBytes
                precondition(end >= hintedSlotsStart + hintedSlotBytes * cells.count, "branch cells overflow the page")
                var cell = CellWriter(page, at: end)
                cell.writeVarint(UInt64(entry.key.count))
                cell.write(entry.key)
                cell.writeLittleEndian(entry.child.rawValue)
                writeSlot(page, index: index, offset: end)
            }
            writeHints(UnsafeRawBufferPointer(page), into: page, count: cells.count)
        }
        seal(&page)
        return page
    }

    /// Decodes a branch into entries whose first key is `lowerBound`.
    static func decodeBranch(_ page: [UInt8], count: Int, leftmost: UInt64, lowerBound: [UInt8]) throws(PageDefect) -> [BranchEntry] {
        guard leftmost >= PageID.firstDataPage.rawValue else { throw PageDefect("its leftmost child is page \(leftmost)") }
        try checkHints(page, count: count)
        var entries = [BranchEntry(key: lowerBound, child: PageID(leftmost))]
        entries.reserveCapacity(count + 1)
        for index in 0..<count {
            var reader = try cellReader(page, index: index, count: count)
            do {
                let key = try reader.readBytes(count: try reader.readLength(limit: Limits.maxKeyBytes))
                let child = try reader.readUInt64()
                guard child >= PageID.firstDataPage.rawValue else { throw PageDefect("cell \(index) points at page \(child)") }
                if index > 0, !(entries.last!.key.lexicographicallyPrecedes(key)) {
                    throw PageDefect("cell \(index) is out of key order")
                }
                entries.append(BranchEntry(key: key, child: PageID(child)))
            } catch let defect as PageDefect {
                throw defect
            } catch {
                throw PageDefect("cell \(index) does not decode: \(error)")
            }
        }
        return entries
    }

    // MARK: Overflow and free-list pages

    /// Data bytes one overflow page carries.
    static func overflowCapacity(pageBytes: Int) -> Int { pageBytes - PageHeader.bytes - 4 }

    /// Header byte 5 of an overflow chain's first page (format 4) when the chain holds its
    /// value as one LZ4 block; zero otherwise, and on every later page.
    static let compressedChain: UInt8 = 1

    static func encodeOverflow(_ data: some Collection<UInt8>, next: PageID, id: PageID, generation: UInt64, pageBytes: Int,
                               marked: Bool = false) -> [UInt8] {
        var page = emptyPage(.overflow, id: id, generation: generation, count: 0, word: next.rawValue, pageBytes: pageBytes)
        if marked { page[leafFormatOffset] = compressedChain }
        withUnsafeBytes(of: UInt32(data.count).littleEndian) { page.replaceSubrange(32..<36, with: $0) }
        page.replaceSubrange(36..<(36 + data.count), with: data)
        seal(&page)
        return page
    }

    static func decodeOverflow(_ page: [UInt8]) throws(PageDefect) -> ArraySlice<UInt8> {
        let count = page.withUnsafeBytes { Int(UInt32(littleEndian: $0.loadUnaligned(fromByteOffset: 32, as: UInt32.self))) }
        guard count > 0, count <= overflowCapacity(pageBytes: page.count) else {
            throw PageDefect("it declares \(count) data bytes")
        }
        return page[36..<(36 + count)]
    }

    /// Page IDs one free-list page holds.
    static func freeListCapacity(pageBytes: Int) -> Int { (pageBytes - PageHeader.bytes) / 8 }

    static func encodeFreeList(_ ids: ArraySlice<PageID>, next: PageID, id: PageID, generation: UInt64, pageBytes: Int) -> [UInt8] {
        var page = emptyPage(.freeList, id: id, generation: generation, count: ids.count, word: next.rawValue,
                             pageBytes: pageBytes)
        var offset = PageHeader.bytes
        for free in ids {
            withUnsafeBytes(of: free.rawValue.littleEndian) { page.replaceSubrange(offset..<(offset + 8), with: $0) }
            offset += 8
        }
        seal(&page)
        return page
    }

    static func decodeFreeList(_ page: [UInt8], count: Int) throws(PageDefect) -> [PageID] {
        guard count <= freeListCapacity(pageBytes: page.count) else { throw PageDefect("it declares \(count) entries") }
        return page.withUnsafeBytes { buffer in
            (0..<count).map { PageID(UInt64(littleEndian: buffer.loadUnaligned(fromByteOffset: PageHeader.bytes + 8 * $0, as: UInt64.self))) }
        }
    }

    // MARK: Slots

    /// Where the slots of a leaf or branch page whose header was verified start, and the
    /// bytes of each: after the hint offset (and the keys' shared prefix, where the cells
    /// leave it out), 6, in a hinted page; else after the header, 2.
    @inline(__always)
    static func slotLayout(_ page: UnsafeRawBufferPointer) -> (start: Int, width: Int) {
        let format = page[leafFormatOffset]
        guard format & hintedSlots != 0 else { return (PageHeader.bytes, 2) }
        return (format & elidedPrefix != 0 ? hintedSlotsStart + storedHintOffset(page) : hintedSlotsStart, hintedSlotBytes)
    }

    /// Where a page's slots and cells lie, read from its header once: a walk through a
    /// leaf's cells reads it when it enters the leaf, not at every cell.
    struct CellLayout {
        /// Where the slots start, and the bytes of each.
        let slots: Int
        let width: Int
        /// Where the cells may start: past the last slot.
        let cellsStart: Int
        let count: Int

        /// The layout of no page: it has no cells.
        init() {
            (slots, width, cellsStart, count) = (0, 0, 0, 0)
        }

        @inline(__always)
        init(_ page: UnsafeRawBufferPointer, count: Int) {
            (slots, width) = slotLayout(page)
            cellsStart = slots + width * count
            self.count = count
        }

        /// `PageCodec.keyLocation(_:index:count:)` in a page of this layout.
        @inline(__always)
        func keyLocation(_ page: UnsafeRawBufferPointer, index: Int) throws(PageDefect) -> (start: Int, length: Int) {
            let offset = try cellOffset(page, index: index)
            // The key length is a varint of at most two bytes (Limits.maxKeyBytes < 16,384).
            var length = Int(page[offset] & 0x7F)
            var start = offset + 1
            if page[offset] & 0x80 != 0 {
                guard start < page.count, page[start] & 0x80 == 0, page[start] != 0 else {
                    throw PageDefect("cell \(index) has a bad key length")
                }
                length |= Int(page[start]) << 7
                start += 1
            }
            guard length <= Limits.maxKeyBytes, start + length <= page.count else {
                throw PageDefect("cell \(index) has a key running past the page")
            }
            return (start, length)
        }

        /// Where cell `index` starts, as its slot says, checked to lie in the cell area.
        @inline(__always)
        func cellOffset(_ page: UnsafeRawBufferPointer, index: Int) throws(PageDefect) -> Int {
            // The slot array must fit before a slot is read: the buffer is not bounds-checked.
            guard index >= 0, index < count, cellsStart <= page.count else { throw PageDefect("its \(count) slots do not fit") }
            let offset = Int(UInt16(littleEndian: page.loadUnaligned(fromByteOffset: slots + width * index, as: UInt16.self)))
            guard offset >= cellsStart, offset < page.count else {
                throw PageDefect("slot \(index) points outside the cells")
            }
            return offset
        }
    }

    private static func writeSlot(_ page: UnsafeMutableRawBufferPointer, index: Int, offset: Int) {
        let at = hintedSlotsStart + hintedSlotBytes * index
        page[at] = UInt8(truncatingIfNeeded: offset)
        page[at + 1] = UInt8(truncatingIfNeeded: offset >> 8)
    }

    /// A reader of cell `index`, whose slot must point inside the cell area.
    private static func cellReader(_ page: [UInt8], index: Int, count: Int) throws(PageDefect) -> ByteReader {
        let offset = page.withUnsafeBytes { raw in
            Result { () throws(PageDefect) in try CellLayout(raw, count: count).cellOffset(raw, index: index) }
        }
        return ByteReader(page, start: try offset.get(), end: page.count)
    }
}

/// Why a page does not decode (wrapped by the page file into `EngineError.corruptPage`).
struct PageDefect: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}

@inline(__always)
func varintBytes(_ value: Int) -> Int { varintBytes(UInt64(value)) }

/// Bytes of `value` as an unsigned LEB128 varint (1 to 10): seven bits a byte, from its
/// highest set bit, without a loop.
@inline(__always)
func varintBytes(_ value: UInt64) -> Int {
    (64 - (value | 1).leadingZeroBitCount + 6) / 7
}

/// Writes one cell's bytes in place, from `at` on, into a page whose caller checked that
/// the cell fits (its size is the entry's `cellBytes` less the slot).
private struct CellWriter {
    private let page: UnsafeMutableRawBufferPointer
    private var at: Int

    init(_ page: UnsafeMutableRawBufferPointer, at: Int) {
        self.page = page
        self.at = at
    }

    mutating func write(_ byte: UInt8) {
        page[at] = byte
        at += 1
    }

    /// An unsigned LEB128 varint.
    mutating func writeVarint(_ value: UInt64) {
        ByteWriter.storeVarint(value, in: page, at: &at)
    }

    mutating func writeLittleEndian<T: FixedWidthInteger>(_ value: T) {
        withUnsafeBytes(of: value.littleEndian) { write($0) }
    }

    /// A leaf entry's cell (FORMAT.md, "Leaf and branch pages"), its key's first `elided`
    /// bytes left out.
    mutating func write(_ entry: LeafEntry, elided: Int) {
        writeVarint(UInt64(entry.key.count - elided))
        entry.key.withUnsafeBytes { write(UnsafeRawBufferPointer(rebasing: $0[elided...])) }
        writeVarint(entry.version)
        switch entry.payload {
        case let .inline(value):
            write(UInt8(0))
            writeVarint(UInt64(value.count))
            write(value)
        case let .overflow(value):
            write(value.run == nil ? PageCodec.overflowFlag : PageCodec.runFlag)
            writeLittleEndian(UInt32(value.byteCount))
            writeLittleEndian(value.first.rawValue)
            if let run = value.run {
                writeLittleEndian(UInt32(run.stored))
                writeLittleEndian(run.checksum)
            }
        case .tombstone:
            write(PageCodec.tombstoneFlag)
        }
    }

    /// A stored cell (StoredCell.swift), its key's first `elided` bytes left out and the
    /// rest of it copied as it is.
    mutating func write(_ cell: StoredCell, elided: Int) {
        writeVarint(UInt64(cell.keyCount - elided))
        cell.withKey { write(UnsafeRawBufferPointer(rebasing: $0[elided...])) }
        writeVarint(cell.version)
        cell.withBody { write($0) }
    }

    mutating func write(_ bytes: [UInt8]) {
        bytes.withUnsafeBytes { write($0) }
    }

    mutating func write(_ bytes: UnsafeRawBufferPointer) {
        guard !bytes.isEmpty else { return }
        precondition(at + bytes.count <= page.count, "a cell runs past its page")
        (page.baseAddress! + at).copyMemory(from: bytes.baseAddress!, byteCount: bytes.count)
        at += bytes.count
    }
}

// B+tree pages searched where they lie: a point lookup binary-searches the slots comparing
// keys in place (compareBytes, no allocation) and reads only the cell it lands on; whole-page
// decoding is for checkpoints and `verify`. The bytes are borrowed, from the data file's
// mapping or from the page cache (PageFile.withPage), for the duration of one call.
// Every slot and length is checked against the page's bounds on use (the checksum already
// matched; bounds keep a crafted page from trapping or reading past it).
import CStrataPlatform
import StrataCodec

/// A page whose checksum, type and ID were verified when it was read (a copy where the data
/// file is not mapped, or a compressed leaf's expansion), as the page cache or a cursor
/// holds it: its bytes live as long as the object.
final class CachedPage: Sendable {
    let page: TreePage

    init(_ bytes: [UInt8], type: PageType, count: Int, word: UInt64) {
        let copy = UnsafeMutableRawBufferPointer.allocate(byteCount: bytes.count, alignment: 16)
        bytes.withUnsafeBytes { copy.copyMemory(from: $0) }
        page = TreePage(bytes: UnsafeRawBufferPointer(copy), type: type, count: count, word: word)
    }

    /// A page whose bytes, allocated by the caller, the object owns from now on.
    init(owning bytes: UnsafeMutableRawBufferPointer, type: PageType, count: Int, word: UInt64) {
        page = TreePage(bytes: UnsafeRawBufferPointer(bytes), type: type, count: count, word: word)
    }

    deinit { page.bytes.deallocate() }
}

/// A tree page a cursor holds between steps: a mapped page needs no owner (the mapping
/// outlives every snapshot); a copied or expanded one, in the page cache or beside it,
/// keeps its bytes alive.
struct HeldPage {
    let id: PageID
    let page: TreePage
    let owner: CachedPage?
}

/// A verified leaf or branch page, borrowed.
struct TreePage: @unchecked Sendable {
    // @unchecked: the bytes are never written while a reader can reach them (PageFile.P1 of
    // PageFile.swift).
    let bytes: UnsafeRawBufferPointer
    let type: PageType
    let count: Int
    /// The header's type-specific word (a branch's leftmost child).
    let word: UInt64

    /// The child of this branch whose range holds `key`.
    func child(for key: UnsafeRawBufferPointer) throws(PageDefect) -> PageID {
        try child(at: try childIndex(for: key))
    }

    /// Which child of this branch holds `key`: 0 for the leftmost, i for cell i - 1's.
    func childIndex(for key: UnsafeRawBufferPointer) throws(PageDefect) -> Int {
        // The last cell whose key is ≤ key, or the leftmost child when none is.
        if isHinted {
            let side = try sideOfPrefix(key)
            if side != 0 { return side < 0 ? 0 : count }
            let (index, found) = try lowerBoundByHints(key)
            return found ? index + 1 : index
        }
        var low = 0
        var high = count
        while low < high {
            let middle = (low + high) / 2
            if try compareCell(middle, with: key) <= 0 { low = middle + 1 } else { high = middle }
        }
        return low
    }

    /// `childIndex(for:)` for a key known to lie at or past child `first`'s range (the
    /// cells before it are at most the key): the search gallops from there, comparing the
    /// cells `first`, `first` + 1, + 3, + 7 … until one is above the key, then halves the
    /// last gap. A batch of ascending keys (Snapshot+Batch.swift) finds each key's child a
    /// step or two past the one before it, where a search of the whole page took a step
    /// per halving, each a whole-key comparison wherever hints tie (a root page whose keys
    /// share one byte ties across every key of one record type).
    func childIndex(for key: UnsafeRawBufferPointer, from first: Int) throws(PageDefect) -> Int {
        guard first > 0, first <= count else { return try childIndex(for: key) }
        guard isHinted, try sideOfPrefix(key) == 0 else {
            return try gallop(from: first) { (index) throws(PageDefect) in try compareCell(index, with: key) }
        }
        // As `lowerBoundByHints` reads the slots and cells.
        let prefix = PageCodec.storedHintOffset(bytes)
        let skipped = isElided ? prefix : 0
        let slots = PageCodec.hintedSlotsStart + skipped
        guard slots + PageCodec.hintedSlotBytes * count <= bytes.count else {
            throw PageDefect("its \(count) slots do not fit")
        }
        let target = PageCodec.hint(of: key, at: prefix)
        let rest = UnsafeRawBufferPointer(start: key.baseAddress.map { $0 + skipped }, count: key.count - skipped)
        return try gallop(from: first) { (index) throws(PageDefect) in
            let hint = PageCodec.slotHint(bytes, slots: slots, index: index)
            return hint != target ? (hint < target ? -1 : 1) : try compareStored(index, with: rest)
        }
    }

    /// The number of cells at most a key, found from `first` (the cells before it are),
    /// where `order(i)` compares cell i with the key.
    @inline(__always)
    private func gallop(from first: Int, _ order: (Int) throws(PageDefect) -> Int) throws(PageDefect) -> Int {
        // Every cell below `low` is at most the key; every cell from `high` on is above it.
        var low = first
        var high = count
        var step = 1
        while low < high {
            let probe = min(low + step - 1, high - 1)
            if try order(probe) > 0 {
                high = probe
                break
            }
            low = probe + 1
            step *= 2
        }
        while low < high {
            let middle = (low + high) / 2
            if try order(middle) <= 0 { low = middle + 1 } else { high = middle }
        }
        return low
    }

    /// The key of this branch's cell `index` (0..<count), the lowest key of child
    /// `index` + 1 and so the bound above child `index`'s keys; nil in a page that elides
    /// its keys' prefix (no branch does), whose cells hold only the rest of a key.
    func separator(_ index: Int) throws(PageDefect) -> UnsafeRawBufferPointer? {
        guard !isElided else { return nil }
        let (start, length) = try PageCodec.keyLocation(bytes, index: index, count: count)
        return UnsafeRawBufferPointer(rebasing: bytes[start..<(start + length)])
    }

    /// Child `index` of this branch (0...count): the leftmost, or cell index - 1's.
    func child(at index: Int) throws(PageDefect) -> PageID {
        let child: UInt64
        if index == 0 {
            child = word
        } else {
            let (start, length) = try PageCodec.keyLocation(bytes, index: index - 1, count: count)
            guard start + length + 8 <= bytes.count else { throw PageDefect("cell \(index - 1) runs past the page") }
            child = UInt64(littleEndian: bytes.loadUnaligned(fromByteOffset: start + length, as: UInt64.self))
        }
        guard child >= PageID.firstDataPage.rawValue else { throw PageDefect("a child pointer names page \(child)") }
        return PageID(child)
    }

    /// The index of the first cell of this leaf whose key is ≥ `key`, and whether it is equal.
    func lowerBound(_ key: UnsafeRawBufferPointer) throws(PageDefect) -> (index: Int, found: Bool) {
        guard isHinted else { return try lowerBoundByKeys(key) }
        let side = try sideOfPrefix(key)
        if side != 0 { return (side < 0 ? 0 : count, false) }
        return try lowerBoundByHints(key)
    }

    /// The cell of this leaf for `key`, or nil.
    func leafCell(for key: UnsafeRawBufferPointer) throws(PageDefect) -> LeafCell? {
        // A key this leaf holds shares its common prefix, so the hints find it; any other
        // key is not found either way (no check as in lowerBound), except in a leaf whose
        // cells leave that prefix out, where only the rest of a key is compared.
        if isElided, try sideOfPrefix(key) != 0 { return nil }
        let (index, found) = isHinted ? try lowerBoundByHints(key) : try lowerBoundByKeys(key)
        return found ? try leafCell(index) : nil
    }

    /// Whether this page's slots carry hints (PageCodec, "Hints").
    private var isHinted: Bool { bytes[PageCodec.leafFormatOffset] & PageCodec.hintedSlots != 0 }

    /// Whether this leaf's cells leave out the prefix its keys share (stored once, after
    /// the hint offset, which is its length).
    var isElided: Bool { bytes[PageCodec.leafFormatOffset] & PageCodec.elidedPrefix != 0 }

    /// The prefix every key of this elided leaf shares, borrowed from the page.
    var elidedPrefix: UnsafeRawBufferPointer {
        UnsafeRawBufferPointer(rebasing: bytes[PageCodec.hintedSlotsStart..<(PageCodec.hintedSlotsStart + PageCodec.storedHintOffset(bytes))])
    }

    /// 0 when `key` starts with the prefix every key of this hinted page shares (its first
    /// key's first h bytes), so that hints order it; else which side of all of them it is
    /// on (negative: before), as a key without that prefix sorts before or after them all.
    @inline(__always)
    private func sideOfPrefix(_ key: UnsafeRawBufferPointer) throws(PageDefect) -> Int {
        guard count > 0 else { return 0 }
        let prefix: UnsafeRawBufferPointer
        if isElided {
            prefix = elidedPrefix
        } else {
            let (start, length) = try PageCodec.keyLocation(bytes, index: 0, count: count)
            prefix = UnsafeRawBufferPointer(start: bytes.baseAddress! + start, count: min(PageCodec.storedHintOffset(bytes), length))
        }
        let shared = min(prefix.count, key.count)
        let order = compareBytes(UnsafeRawBufferPointer(start: key.baseAddress, count: shared),
                                 UnsafeRawBufferPointer(start: prefix.baseAddress, count: shared))
        if order != 0 { return order }
        return key.count < prefix.count ? -1 : 0
    }

    private func lowerBoundByKeys(_ key: UnsafeRawBufferPointer) throws(PageDefect) -> (index: Int, found: Bool) {
        var low = 0
        var high = count
        while low < high {
            let middle = (low + high) / 2
            let order = try compareCell(middle, with: key)
            if order == 0 { return (middle, true) }
            if order < 0 { low = middle + 1 } else { high = middle }
        }
        return (low, false)
    }

    /// The binary search over the slots' hints, reading a cell only where hints tie: exact
    /// for a key that shares the leaf's common prefix.
    @inline(__always)
    private func lowerBoundByHints(_ key: UnsafeRawBufferPointer) throws(PageDefect) -> (index: Int, found: Bool) {
        // The slot array must fit before a hint is read; a crafted hint offset is clamped
        // (wrong hints give wrong answers, which verify reports, never a wild read).
        // In a leaf that elides its keys' prefix the slots follow it, and cells hold the
        // keys from it on: the caller checked that `key` starts with it.
        let prefix = PageCodec.storedHintOffset(bytes)
        let skipped = isElided ? prefix : 0
        let slots = PageCodec.hintedSlotsStart + skipped
        guard slots + PageCodec.hintedSlotBytes * count <= bytes.count else {
            throw PageDefect("its \(count) slots do not fit")
        }
        guard key.count >= skipped else { return (0, false) }
        prefetchSlots(from: slots)
        let target = PageCodec.hint(of: key, at: prefix)
        let rest = UnsafeRawBufferPointer(start: key.baseAddress.map { $0 + skipped }, count: key.count - skipped)
        var low = 0
        var high = count
        while low < high {
            let middle = (low + high) / 2
            let hint = PageCodec.slotHint(bytes, slots: slots, index: middle)
            let order = hint != target ? (hint < target ? -1 : 1) : try compareStored(middle, with: rest)
            if order == 0 { return (middle, true) }
            if order < 0 { low = middle + 1 } else { high = middle }
        }
        return (low, false)
    }

    /// Starts loading the slots a search reads before it reads them: the search reads one
    /// slot per step, and each step's line is known only once the step before compared,
    /// so in a page not in the cache each step waited on a miss of its own. Every line of
    /// the slots past the header's when they take at most `prefetchedSlotLines` (a full
    /// page of 4 KiB takes 16), else the slots of the search's first five steps. A hint:
    /// it never faults, and the caller checked that the slots lie in the page.
    @inline(__always)
    private func prefetchSlots(from slots: Int) {
        let start = Int(bitPattern: bytes.baseAddress!) + slots
        let end = start + PageCodec.hintedSlotBytes * count
        if end - start <= 64 * Self.prefetchedSlotLines {
            for line in stride(from: (start | 63) + 1, to: end, by: 64) { cplatform_prefetch(UnsafeRawPointer(bitPattern: line)) }
        } else {
            for step in 1..<32 { cplatform_prefetch(UnsafeRawPointer(bitPattern: start + PageCodec.hintedSlotBytes * (count * step / 32))) }
        }
    }

    /// The most cache lines of slots `prefetchSlots` fetches whole.
    private static let prefetchedSlotLines = 32

    /// Leaf cell `index`, its bytes borrowed from the page.
    func leafCell(_ index: Int) throws(PageDefect) -> LeafCell {
        let (start, length) = try PageCodec.keyLocation(bytes, index: index, count: count)
        var offset = start + length
        let version = try readVersion(at: &offset, cell: index)
        return LeafCell(version: version, payload: try contents(at: offset, cell: index))
    }

    /// Where leaf cell `index`'s parts lie in the page, checked as `leafCell` checks them:
    /// the key bytes it stores, its version, and its flags with its value or overflow
    /// reference (what the tree writer copies as it is: StoredCell.swift).
    func leafCellParts(_ index: Int) throws(PageDefect) -> (key: Range<Int>, version: UInt64, body: Range<Int>) {
        let (start, length) = try PageCodec.keyLocation(bytes, index: index, count: count)
        var offset = start + length
        let version = try readVersion(at: &offset, cell: index)
        var end = offset
        _ = try contents(at: offset, cell: index, end: &end)
        return (start..<(start + length), version, offset..<end)
    }

    /// The value (or where its overflow pages are, or a tombstone) of leaf cell `index` whose key lies
    /// at `start`, for a scan: the version is stepped over, not decoded.
    func leafContents(_ index: Int, keyStart start: Int, keyLength length: Int) throws(PageDefect) -> LeafCell.Contents {
        var offset = start + length
        if bytes[PageCodec.leafFormatOffset] & PageCodec.varintVersions != 0 {
            // A varint ends at its first byte below 0x80, within ten bytes.
            let end = min(bytes.count, offset + 10)
            while offset < end && bytes[offset] & 0x80 != 0 { offset += 1 }
            guard offset < end else { throw PageDefect("cell \(index) has a bad version") }
            offset += 1
        } else {
            offset += 8
        }
        return try contents(at: offset, cell: index)
    }

    /// Reads the version of a cell at `offset` and moves past it.
    @inline(__always)
    private func readVersion(at offset: inout Int, cell index: Int) throws(PageDefect) -> UInt64 {
        guard bytes[PageCodec.leafFormatOffset] & PageCodec.varintVersions != 0 else {
            guard offset + 8 <= bytes.count else { throw PageDefect("cell \(index) runs past the page") }
            defer { offset += 8 }
            return UInt64(littleEndian: bytes.loadUnaligned(fromByteOffset: offset, as: UInt64.self))
        }
        do {
            return try Varint.read(bytes, at: &offset)
        } catch .truncated {
            throw PageDefect("cell \(index) runs past the page")
        } catch {
            throw PageDefect("cell \(index) has a bad version")
        }
    }

    /// The flags and payload of a cell, starting at `offset` (just past its version).
    @inline(__always)
    private func contents(at start: Int, cell index: Int) throws(PageDefect) -> LeafCell.Contents {
        var end = start
        return try contents(at: start, cell: index, end: &end)
    }

    /// `contents(at:cell:)`, and where the cell ends.
    @inline(__always)
    private func contents(at start: Int, cell index: Int, end: inout Int) throws(PageDefect) -> LeafCell.Contents {
        var offset = start
        guard offset < bytes.count else { throw PageDefect("cell \(index) runs past the page") }
        let flags = bytes[offset]
        offset += 1
        switch flags {
        case 0:
            // The value's length: a varint of at most three bytes (a value is within a page),
            // most often one.
            guard offset < bytes.count else { throw PageDefect("cell \(index) has a bad value length") }
            var valueLength = Int(bytes[offset])
            offset += 1
            if valueLength >= 0x80 {
                valueLength &= 0x7F
                var shift = 7
                while true {
                    guard offset < bytes.count, shift <= 14 else { throw PageDefect("cell \(index) has a bad value length") }
                    let byte = bytes[offset]
                    offset += 1
                    // Shortest form only, as every varint of the format (`Varint`).
                    guard byte != 0 else { throw PageDefect("cell \(index) has a bad value length") }
                    valueLength |= Int(byte & 0x7F) << shift
                    if byte & 0x80 == 0 { break }
                    shift += 7
                }
            }
            guard valueLength <= bytes.count - offset else { throw PageDefect("cell \(index) has a value running past the page") }
            end = offset + valueLength
            return .inline(UnsafeRawBufferPointer(rebasing: bytes[offset..<(offset + valueLength)]))
        case PageCodec.overflowFlag, PageCodec.runFlag:
            let (value, past) = try PageCodec.decodeLargeValue(flags, bytes, at: offset, cell: index)
            end = past
            return .overflow(value)
        case PageCodec.tombstoneFlag:
            end = offset
            return .tombstone
        default:
            throw PageDefect("cell \(index) has flags \(flags)")
        }
    }

    /// Compares cell `index`'s key with `key` (negative when the cell's is smaller). In a
    /// leaf that elides its keys' prefix, `key` must start with that prefix (`sideOfPrefix`
    /// is 0): only the rest of it is compared.
    @inline(__always)
    private func compareCell(_ index: Int, with key: UnsafeRawBufferPointer) throws(PageDefect) -> Int {
        guard isElided else { return try compareStored(index, with: key) }
        let prefix = PageCodec.storedHintOffset(bytes)
        return try compareStored(index, with: UnsafeRawBufferPointer(start: key.baseAddress.map { $0 + prefix }, count: key.count - prefix))
    }

    /// Compares the key bytes cell `index` stores (all of its key, or in a leaf that
    /// elides its keys' prefix, the rest) with `bytes`.
    @inline(__always)
    private func compareStored(_ index: Int, with key: UnsafeRawBufferPointer) throws(PageDefect) -> Int {
        let (start, length) = try PageCodec.keyLocation(bytes, index: index, count: count)
        return compareBytes(UnsafeRawBufferPointer(start: bytes.baseAddress! + start, count: length), key)
    }

    /// Compares cell `index`'s whole key with any `key` (negative when the cell's is
    /// smaller), the elided prefix included.
    func compareKey(_ index: Int, with key: UnsafeRawBufferPointer) throws(PageDefect) -> Int {
        guard isElided else { return try compareCell(index, with: key) }
        let side = try sideOfPrefix(key)
        if side != 0 { return -side }
        return try compareCell(index, with: key)
    }
}

/// A leaf cell read in place: valid while the page it came from is borrowed.
struct LeafCell {
    enum Contents {
        case inline(UnsafeRawBufferPointer)
        case overflow(LargeValue)
        case tombstone
    }

    let version: UInt64
    let payload: Contents

    /// The cell, whose key is `key`, as an owned entry (its bytes copied).
    func entry(key: UnsafeRawBufferPointer) -> LeafEntry {
        let owned: Payload = switch payload {
        case let .inline(value): .inline(Array(value))
        case let .overflow(value): .overflow(value)
        case .tombstone: .tombstone
        }
        return LeafEntry(key: Array(key), version: version, payload: owned)
    }
}

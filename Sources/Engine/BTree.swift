// The read side of the copy-on-write B+tree: point lookups and ordered iteration over one
// immutable tree (a root and a height from a meta page or a checkpoint).
//
// Invariants (checked by `verify`):
//  BTree.T1. Every leaf is at depth `height`; no loop descends further (a corrupt child pointer
//      cannot make a read loop).
//  BTree.T2. Keys are strictly increasing within a page and across pages in tree order; every
//      key under branch entry i is ≥ its key and < the key of entry i + 1.
// Thread-safety: a tree is immutable; any thread may read it while a snapshot pins it.

/// One version of the B+tree.
struct BTree: Sendable, Equatable {
    var root: PageID
    var height: Int

    static let empty = BTree(root: .none, height: 0)

    /// The entry for `key` (a tombstone included), or nil. O(height) page reads.
    func entry(_ key: [UInt8], file: PageFile) throws -> LeafEntry? {
        try key.withUnsafeBytes { key in try withCell(key, file: file) { $0?.entry(key: key) } }
    }

    /// Calls `body` with the leaf cell for `key` (a tombstone included), or nil, borrowed
    /// from its page: nothing is copied. O(height) page reads.
    @inline(__always)
    func withCell<Result>(_ key: UnsafeRawBufferPointer, file: PageFile, _ body: (LeafCell?) throws -> Result) throws -> Result {
        guard root != .none else { return try body(nil) }
        guard height >= 1 else { throw corrupt(file, root, "a tree of height \(height) has a root") }
        var id = root
        for _ in 1..<height {
            id = try file.withPage(id) { page in
                guard page.type == .branch else { throw PageDefect("a leaf above the bottom level") }
                return try page.child(for: key)
            }
        }
        return try file.withLeafCell(id, key, body)
    }

    /// A cursor at the first key ≥ `start` (forward) or ≤ `start` (reverse); a nil start
    /// begins at the first (or last) key.
    func cursor(from start: [UInt8]?, reverse: Bool, file: PageFile) throws -> TreeCursor {
        var cursor = TreeCursor(tree: self, file: file, reverse: reverse)
        if let start { try start.withUnsafeBytes { try cursor.seek($0) } } else { try cursor.seek(nil) }
        return cursor
    }
}

func corrupt(_ file: PageFile, _ id: PageID, _ reason: String) -> EngineError {
    .corruptPage(path: file.path, offset: id.offset(pageBytes: file.pageBytes), reason: reason)
}

/// A branch page on a cursor's way down and the child the walk is in (0...count). A struct,
/// not a tuple: an array of tuples holding a class reference was copied and destroyed
/// through the runtime's generic tuple witnesses (3.5 % of a first scan's instructions).
struct PathStep {
    let page: HeldPage
    var child: Int
}

/// Walks a tree's leaf cells in order, reading them where they lie, with a stack of branch
/// pages and child positions (no sibling pointers: copy-on-write trees have none). The
/// pages it holds stay valid while the snapshot that gave it the tree lives (PageFile.P1 of
/// PageFile.swift).
struct TreeCursor {
    let tree: BTree
    let file: PageFile
    let reverse: Bool
    /// Branch pages from the root down, each with the child the walk is in.
    private var path: [PathStep] = []
    /// The leaf the cursor is in (nil past the end), its ID, and what keeps its bytes alive.
    private var leaf: TreePage?
    private var leafID = PageID.none
    private var leafOwner: CachedPage?
    /// Where the leaf's slots and cells lie, read once as the cursor enters it.
    private var layout = PageCodec.CellLayout()
    private var position = 0
    /// Where the key of cell `keyPosition` of the leaf lies (-1: no cell looked at yet).
    private var keyPosition = -1
    private var keyStart = 0
    private var keyLength = 0
    /// Where the whole key of a cell of a leaf that elides its keys' prefix is put together:
    /// the leaf's prefix, copied once when the cursor enters the leaf, then each cell's rest.
    private var wholeKey: KeyBuffer?
    /// The length of the prefix in `wholeKey` when the leaf elides one, else -1.
    private var elided = -1
    /// Whether the leaf's cells store their versions as varints (else eight bytes each).
    private var varintVersions = false
    /// Bytes of the page cache's leaves the walk held since the last seek: once they
    /// reach a quarter of the cache, the walk holds the leaves the cache does not hold
    /// beside it (`PageFile.holdPage(_:caching:)`).
    private var walkedBytes = 0

    init(tree: BTree, file: PageFile, reverse: Bool) {
        self.tree = tree
        self.file = file
        self.reverse = reverse
        // Room for the whole path at once: appended level by level, it was grown three
        // times a seek at a height of four (about 1,100 instructions of a record query).
        path.reserveCapacity(max(Int(tree.height) - 1, 0))
    }

    /// Positions the cursor at the first cell at or after (before, in reverse) `key`, or
    /// at the first (last) cell for nil.
    mutating func seek(_ key: UnsafeRawBufferPointer?) throws {
        path.removeAll(keepingCapacity: true)
        hold(nil)
        position = 0
        walkedBytes = 0
        guard tree.root != .none else { return }
        guard tree.height >= 1 else { throw corrupt(file, tree.root, "a tree of height \(tree.height) has a root") }
        var id = tree.root
        for _ in 1..<tree.height {
            let held = try file.holdPage(id)
            guard held.page.type == .branch else { throw corrupt(file, id, "a leaf above the bottom level") }
            let child = try checked(held) { page in
                try key.map { try page.childIndex(for: $0) } ?? (reverse ? page.count : 0)
            }
            path.append(PathStep(page: held, child: child))
            id = try checked(held) { try $0.child(at: child) }
        }
        let held = try file.holdPage(id)
        guard held.page.type == .leaf else { throw corrupt(file, id, "a branch where a leaf belongs") }
        hold(held)
        if let key {
            let (index, found) = try checked(held) { try $0.lowerBound(key) }
            position = reverse && !found ? index - 1 : index
        } else {
            position = reverse ? held.page.count - 1 : 0
        }
        try settle()
    }

    // `currentKey()` and `currentContents()` are `mutating` though they change nothing
    // but a cached key location: a mutating method gets the cursor by address, a
    // non-mutating one a copy of all its fields (callgrind showed the copy on every step).

    /// The value (or tombstone) at the cursor, which must be on a cell: the version is not
    /// decoded (a scan's path).
    mutating func currentContents() throws -> LeafCell.Contents {
        let leaf = leaf!
        do {
            if keyPosition == position { return try leaf.leafContents(position, keyStart: keyStart, keyLength: keyLength) }
            return try leaf.leafCell(position).payload
        } catch {
            throw file.corrupt(leafID, error)
        }
    }

    /// The version of the change (value or tombstone) at the cursor, which must be on a cell.
    mutating func currentVersion() throws -> UInt64 {
        let leaf = leaf!
        do {
            return try leaf.leafCell(position).version
        } catch {
            throw file.corrupt(leafID, error)
        }
    }

    /// The key at the cursor, or nil past the end (valid until the cursor moves): the
    /// cell's key only, for a merge that needs the value of the winner alone.
    mutating func currentKey() throws -> UnsafeRawBufferPointer? {
        guard let leaf, position >= 0, position < leaf.count else { return nil }
        let start: Int
        let length: Int
        do {
            (start, length) = try layout.keyLocation(leaf.bytes, index: position)
        } catch {
            throw file.corrupt(leafID, error)
        }
        (keyPosition, keyStart, keyLength) = (position, start, length)
        guard elided >= 0 else { return UnsafeRawBufferPointer(rebasing: leaf.bytes[start..<(start + length)]) }
        let buffer = ownKeyBytes(keeping: elided)
        guard elided + length <= Limits.maxKeyBytes else {
            throw file.corrupt(leafID, PageDefect("cell \(position) has a key of \(elided + length) bytes"))
        }
        // A few bytes most often (what sets a key apart from its leaf's others).
        copyKeyBytes(to: buffer + elided, from: leaf.bytes.baseAddress! + start, count: length)
        return UnsafeRawBufferPointer(start: buffer, count: elided + length)
    }

    /// Leaves entered so far: a caller that checked the cursor's leaf once can tell when it
    /// moved to another.
    private(set) var leavesEntered = 0

    /// The last cell of the cursor's leaf in the walk's direction when its key comes
    /// before `rival` in that direction (or there is no rival), with whether it also
    /// comes before `bound` (a forward walk's upper bound): the leaf is in key order, so
    /// every cell from the cursor's to that one does too. Nil when the cursor is past the
    /// end, on that last cell already, or the last cell's key does not come before
    /// `rival`, or cannot be read (the walk then reads the cells one by one, and throws
    /// only if it reaches the bad one, as it did before runs). One key read and compared
    /// for the cells of a leaf. It trusts the leaf's keys to be in order, as a walk always
    /// has (`verify` checks it): in a leaf whose keys are not, a run may hand out a key
    /// the merge would have stopped at.
    mutating func runEnd(before rival: UnsafeRawBufferPointer?, bound: UnsafeRawBufferPointer?) -> (end: Int, beforeBound: Bool)? {
        guard let leaf, position >= 0, position < leaf.count else { return nil }
        let end = reverse ? 0 : leaf.count - 1
        guard end != position, let (start, length) = try? layout.keyLocation(leaf.bytes, index: end) else { return nil }
        let rest = UnsafeRawBufferPointer(rebasing: leaf.bytes[start..<(start + length)])
        let prefix = elided >= 0 ? UnsafeRawBufferPointer(start: wholeKey.unsafelyUnwrapped.bytes, count: elided) : UnsafeRawBufferPointer(start: nil, count: 0)
        if let rival {
            let order = compareSplit(prefix, rest, rival)
            guard reverse ? order > 0 : order < 0 else { return nil }
        }
        let beforeBound = bound.map { compareSplit(prefix, rest, $0) < 0 } ?? false
        return (end, beforeBound)
    }

    /// Moves a forward cursor past the cells whose keys come before `key` (every cell
    /// left, for nil), counting those that hold a value (a tombstone is passed, not
    /// counted), and returns the count and whether the cell it stops on holds `key`: a
    /// count's walk of the tree from one memtable key to the next (`Snapshot.count`). A
    /// leaf whose last key comes before `key` is counted from its cells' flags, no key read
    /// or compared; in the leaf that holds `key`'s place, a gallop from the cursor finds
    /// it in O(log d) comparisons for a place d cells on. Once the count reaches `limit` it
    /// returns at once, the cursor anywhere.
    mutating func countValues(before key: UnsafeRawBufferPointer?, limit: Int) throws -> (count: Int, onKey: Bool) {
        precondition(!reverse, "a count walks forward")
        var count = 0
        while let leaf, position >= 0, position < leaf.count {
            if let key {
                let tail = restAfterElidedPrefix(key)
                // A leaf just entered is likely to lie before `key` whole: its last key first.
                let lastOrder = position == 0 ? try compareCell(leaf.count - 1, with: key, tail: tail) : nil
                if lastOrder.map({ $0 >= 0 }) ?? true, let (place, onKey) = try gallop(to: key, tail: tail, lastOrder: lastOrder) {
                    count += try valueCells(position..<place, limit: limit - count)
                    position = place
                    return (count, onKey)
                }
            }
            // The whole rest of the leaf is counted: the next one's lines are on their way meanwhile.
            prefetchNextLeaf()
            count += try valueCells(position..<leaf.count, limit: limit - count)
            guard count < limit else { return (count, false) }
            position = leaf.count
            try settle()
        }
        return (count, false)
    }

    /// The bytes of `key` after the prefix the cursor's leaf elides, when `key` starts
    /// with it (all of `key` when the leaf elides none), else nil: a key compared with
    /// many of the leaf's cells is compared with their rests alone.
    @inline(__always)
    private func restAfterElidedPrefix(_ key: UnsafeRawBufferPointer) -> UnsafeRawBufferPointer? {
        guard elided > 0 else { return key }
        let prefix = UnsafeRawBufferPointer(start: wholeKey.unsafelyUnwrapped.bytes, count: elided)
        guard key.count >= elided, equalBytes(UnsafeRawBufferPointer(rebasing: key[..<elided]), prefix) else { return nil }
        return UnsafeRawBufferPointer(rebasing: key[elided...])
    }

    /// Cell `index`'s key compared with `key` (negative when the cell's comes first),
    /// read where it lies: the cell's rest compared with `tail` (`restAfterElidedPrefix(key)`),
    /// or without one, the leaf's elided prefix and then the rest.
    @inline(__always)
    private func compareCell(_ index: Int, with key: UnsafeRawBufferPointer, tail: UnsafeRawBufferPointer?) throws -> Int {
        let leaf = leaf.unsafelyUnwrapped
        let start: Int, length: Int
        do {
            (start, length) = try layout.keyLocation(leaf.bytes, index: index)
        } catch {
            throw file.corrupt(leafID, error)
        }
        let rest = UnsafeRawBufferPointer(rebasing: leaf.bytes[start..<(start + length)])
        if let tail { return compareBytes(rest, tail) }
        return compareSplit(UnsafeRawBufferPointer(start: wholeKey.unsafelyUnwrapped.bytes, count: elided), rest, key)
    }

    /// The first cell from the cursor's on whose key is at or after `key`, and whether it
    /// is `key`; nil when the leaf's last comes before `key` (`lastOrder`, when known, is
    /// how the last compared). The cells 0, 1, 3, 7, ... after the cursor's are compared
    /// until one does not come before `key` (the last one at most), then a binary search
    /// between the last two: O(log d) comparisons for a place d cells on, one for the
    /// cursor's own cell.
    private func gallop(to key: UnsafeRawBufferPointer, tail: UnsafeRawBufferPointer?,
                        lastOrder: Int?) throws -> (place: Int, onKey: Bool)? {
        let last = leaf.unsafelyUnwrapped.count - 1
        // Cell `below` comes before `key` (the cursor's cell - 1: none compared yet); cell
        // `above` does not, compared as `aboveOrder`.
        var below = position - 1
        var step = 1
        var above: Int
        var aboveOrder: Int
        while true {
            let probe = min(below + step, last)
            let order = try probe == last ? lastOrder ?? compareCell(probe, with: key, tail: tail) : compareCell(probe, with: key, tail: tail)
            if order >= 0 {
                (above, aboveOrder) = (probe, order)
                break
            }
            if probe == last { return nil }
            if below >= position { step &*= 2 }
            below = probe
        }
        while above - below > 1 {
            let middle = below + (above - below) / 2
            let order = try compareCell(middle, with: key, tail: tail)
            if order < 0 { below = middle } else { (above, aboveOrder) = (middle, order) }
        }
        return (above, aboveOrder == 0)
    }

    /// How many of the leaf's cells in `cells` hold a value (in line or in overflow
    /// pages), not a tombstone, counting no further than `limit`: each cell's flags byte,
    /// past its key and version. Read without a check that throws where the bytes are as
    /// they should be (as `plainCells` reads them); any other cell is read by
    /// `holdsValue`, which names what is wrong with it.
    private func valueCells(_ cells: Range<Int>, limit: Int) throws -> Int {
        guard let bytes = leaf?.bytes, !cells.isEmpty else { return 0 }
        // Every cell of the range has a slot, and the slots fit the page.
        guard cells.lowerBound >= 0, cells.upperBound <= layout.count, layout.cellsStart <= bytes.count else {
            var count = 0
            for index in cells {
                guard count < limit else { break }
                if try holdsValue(index) { count += 1 }
            }
            return count
        }
        let base = bytes.baseAddress.unsafelyUnwrapped
        let size = bytes.count
        let (slots, width, cellsStart) = (layout.slots, layout.width, layout.cellsStart)
        let varint = varintVersions
        var count = 0
        for index in cells {
            guard count < limit else { break }
            let cell = Int(UInt16(littleEndian: base.loadUnaligned(fromByteOffset: slots &+ width &* index, as: UInt16.self)))
            if cell >= cellsStart, cell < size, let (length, start) = Self.shortLength(base, size, at: cell),
               length <= Limits.maxKeyBytes, length <= size &- start {
                var offset = start &+ length
                if varint {
                    let end = min(size, offset &+ 10)
                    while offset < end && base.load(fromByteOffset: offset, as: UInt8.self) & 0x80 != 0 { offset &+= 1 }
                    offset &+= offset < end ? 1 : size
                } else {
                    offset &+= 8
                }
                if offset < size {
                    switch base.load(fromByteOffset: offset, as: UInt8.self) {
                    case 0, PageCodec.overflowFlag, PageCodec.runFlag:
                        count &+= 1
                        continue
                    case PageCodec.tombstoneFlag: continue
                    default: break
                    }
                }
            }
            if try holdsValue(index) { count &+= 1 }
        }
        return count
    }

    /// Whether the leaf's cell `index` holds a value, not a tombstone, read and checked as
    /// `currentContents()` reads it: a defect throws, naming the page and the cell.
    private func holdsValue(_ index: Int) throws -> Bool {
        let leaf = leaf.unsafelyUnwrapped
        do throws(PageDefect) {
            let (start, length) = try layout.keyLocation(leaf.bytes, index: index)
            if case .tombstone = try leaf.leafContents(index, keyStart: start, keyLength: length) { return false }
            return true
        } catch {
            throw file.corrupt(leafID, error)
        }
    }

    /// Moves the cursor to the next cell of its leaf, up to cell `end` (from `runEnd`),
    /// and returns that cell's key (as `currentKey()` gives it) and its value when the
    /// cell holds one in line (most cells); nil once the cursor is on `end`. For a cell
    /// without one (a delete, a value in overflow pages, or a cell this reading does not
    /// take apart, which `currentContents()` checks in full) the value is nil and
    /// `currentContents()` tells. A run's cells are read without the calls and checks of
    /// a step of `advance()` and `currentKey()`: `keyBytes` is `runKeyBytes()`, taken once
    /// for the run.
    /// Out of line: inlined into a walk (`@_transparent`), it took readseq's scan of 1M
    /// keys from 206M instructions to 185M, but the compiler then stopped inlining
    /// `Snapshot.forEach`'s delivery into the walk, a call more for every key of every
    /// walk (records-range at 100,000 records, 1,000 queries: 2.95M instructions more
    /// than without leaf runs, 2.77M of them that call; out of line, 0.30M more).
    @inline(never)
    mutating func step(through end: Int, keyBytes: UnsafeMutableRawPointer?) throws -> (key: UnsafeRawBufferPointer, value: UnsafeRawBufferPointer?)? {
        guard position != end else { return nil }
        let bytes = leaf.unsafelyUnwrapped.bytes
        position += reverse ? -1 : 1
        let start: Int, length: Int
        do {
            (start, length) = try layout.keyLocation(bytes, index: position)
        } catch {
            throw file.corrupt(leafID, error)
        }
        (keyPosition, keyStart, keyLength) = (position, start, length)
        let base = bytes.baseAddress.unsafelyUnwrapped
        let key: UnsafeRawBufferPointer
        if let keyBytes {
            guard elided + length <= Limits.maxKeyBytes else { throw oversizedKey(length) }
            copyKeyBytes(to: keyBytes + elided, from: base + start, count: length)
            key = UnsafeRawBufferPointer(start: keyBytes, count: elided + length)
        } else {
            key = UnsafeRawBufferPointer(start: base + start, count: length)
        }
        // Anything but a value in line, or bytes that do not fit, `currentContents()` reads
        // and checks.
        guard let (valueStart, valueLength) = Self.inlineValue(base, bytes.count, keyEnd: start + length,
                                                               varintVersions: varintVersions) else { return (key, nil) }
        return (key, UnsafeRawBufferPointer(start: base + valueStart, count: valueLength))
    }

    /// A length stored at `offset` (within the page) as a varint of one byte or two (a
    /// second byte of 0, or past 0x7F, is not one), and where the bytes after it start.
    @inline(__always)
    private static func shortLength(_ base: UnsafeRawPointer, _ size: Int, at offset: Int) -> (length: Int, end: Int)? {
        let low = Int(base.load(fromByteOffset: offset, as: UInt8.self))
        guard low >= 0x80 else { return (low, offset &+ 1) }
        guard offset &+ 1 < size else { return nil }
        let high = base.load(fromByteOffset: offset &+ 1, as: UInt8.self)
        guard high != 0 && high < 0x80 else { return nil }
        return (low & 0x7F | Int(high) << 7, offset &+ 2)
    }

    /// Where the value of a cell whose key ends at `keyEnd` lies, when the cell holds it
    /// in line as a run takes it: its version stepped over, a flags byte of 0 and a length
    /// of one or two bytes, all within the page's `size` bytes. Nil for anything else.
    @inline(__always)
    private static func inlineValue(_ base: UnsafeRawPointer, _ size: Int, keyEnd: Int, varintVersions: Bool) -> (start: Int, length: Int)? {
        var offset = keyEnd
        if varintVersions {
            let limit = min(size, offset &+ 10)
            while offset < limit && base.load(fromByteOffset: offset, as: UInt8.self) & 0x80 != 0 { offset &+= 1 }
            guard offset < limit else { return nil }
            offset &+= 1
        } else {
            offset &+= 8
        }
        guard offset &+ 2 <= size, base.load(fromByteOffset: offset, as: UInt8.self) == 0,
              let (length, start) = shortLength(base, size, at: offset &+ 1), length <= size &- start else { return nil }
        return (start, length)
    }

    /// Reads the cells after the cursor's, up to cell `end` (from `runEnd`) and at most
    /// `RunCells.capacity` of them, that hold their value in line (flags 0, as `step` takes
    /// them), stopping before the first that does not or cannot be read (`step` then reads
    /// it, and throws if it is bad); returns how many it read into `cells`. The cursor
    /// does not move: `moveInRun` moves it onto one of them. A loop of its own over the
    /// leaf's bytes, out of line, where `step` is a call and a cursor written back for
    /// each cell: in readseq's scan of 1M keys, about half of them from the tree, a tree key
    /// took 180 instructions through `step` (Benchmarks/JOURNAL.md, "A leaf's cells read in one loop").
    @inline(never)
    func plainCells(through end: Int, into cells: RunCells) -> Int {
        guard let bytes = leaf?.bytes, position != end else { return 0 }
        let direction = reverse ? -1 : 1
        // Every cell from the cursor's next to `end` has a slot, and the slots fit the page
        // (as `CellLayout.cellOffset` checks at each cell).
        let first = position &+ direction
        guard min(first, end) >= 0, max(first, end) < layout.count, layout.cellsStart <= bytes.count else { return 0 }
        let base = bytes.baseAddress.unsafelyUnwrapped
        let size = bytes.count
        let (slots, width, cellsStart) = (layout.slots, layout.width, layout.cellsStart)
        // A key's rest may take this many bytes: a whole key at most `Limits.maxKeyBytes`.
        let keyRoom = Limits.maxKeyBytes &- max(elided, 0)
        let varint = varintVersions
        let out = cells.cells
        let wanted = min(RunCells.capacity, (end &- position) &* direction)
        var index = first
        var read = 0
        while read < wanted {
            let cell = Int(UInt16(littleEndian: base.loadUnaligned(fromByteOffset: slots &+ width &* index, as: UInt16.self)))
            guard cell >= cellsStart, cell < size else { break }
            // The key's length: a varint of one byte, or two (`CellLayout.keyLocation`).
            guard let (length, start) = Self.shortLength(base, size, at: cell), length <= keyRoom, length <= size &- start,
                  let (valueStart, valueLength) = Self.inlineValue(base, size, keyEnd: start &+ length, varintVersions: varint)
            else { break }
            out[read] = RunCell(keyStart: Int32(truncatingIfNeeded: start), keyLength: Int32(truncatingIfNeeded: length),
                                valueStart: Int32(truncatingIfNeeded: valueStart), valueLength: Int32(truncatingIfNeeded: valueLength))
            read &+= 1
            index &+= direction
        }
        return read
    }

    /// Starts loading the whole leaf after the cursor's, in its direction, where it is
    /// mapped, when the same branch holds both (`PageFile.prefetch`: it reads, verifies and
    /// faults nothing). For a walk that reads leaf after leaf: the next one's lines are
    /// on their way while this one's cells are handed out.
    func prefetchNextLeaf() {
        guard !path.isEmpty else { return }
        // The step's fields, not the step: a copy of it would retain and release what keeps
        // its page.
        let top = path.count - 1
        let child = path[top].child + (reverse ? -1 : 1)
        let page = path[top].page.page
        guard child >= 0, child <= page.count, let id = try? page.child(at: child) else { return }
        file.prefetch(id, lines: file.pageBytes / 64)
    }

    /// Moves the cursor `cells` cells on in its direction, onto a cell `plainCells` read as
    /// `cell`, as `step` would have.
    @inline(__always)
    mutating func moveInRun(_ cells: Int, onto cell: RunCell) {
        position += reverse ? -cells : cells
        (keyPosition, keyStart, keyLength) = (position, Int(cell.keyStart), Int(cell.keyLength))
    }

    /// The first byte of the cursor's leaf, where `RunCell`'s offsets count from.
    var leafBase: UnsafeRawPointer { leaf.unsafelyUnwrapped.bytes.baseAddress.unsafelyUnwrapped }

    /// The bytes of the prefix the cursor's leaf elides from its keys (0 for none): where
    /// a key's rest goes in `runKeyBytes()`.
    var elidedBytes: Int { max(elided, 0) }

    /// The error of a cell whose whole key would be longer than a key may be.
    private func oversizedKey(_ length: Int) -> EngineError {
        file.corrupt(leafID, PageDefect("cell \(position) has a key of \(elided + length) bytes"))
    }

    /// Where `step(through:keyBytes:)` puts the keys of a leaf that elides their prefix
    /// (nil for one that does not), made the cursor's own: a run of steps checks that once.
    @inline(__always)
    mutating func runKeyBytes() -> UnsafeMutableRawPointer? {
        elided >= 0 ? ownKeyBytes(keeping: elided) : nil
    }

    private mutating func hold(_ held: HeldPage?) {
        leavesEntered &+= 1
        keyPosition = -1
        elided = -1
        guard let held else {
            leaf = nil
            layout = PageCodec.CellLayout()
            leafID = .none
            leafOwner = nil
            varintVersions = false
            return
        }
        let page = held.page
        leaf = page
        layout = PageCodec.CellLayout(page.bytes, count: page.count)
        leafID = held.id
        leafOwner = held.owner
        varintVersions = page.bytes[PageCodec.leafFormatOffset] & PageCodec.varintVersions != 0
        if page.isElided {
            let prefix = page.elidedPrefix
            ownKeyBytes(keeping: 0).copyMemory(from: prefix.baseAddress!, byteCount: prefix.count)
            elided = prefix.count
        }
    }

    /// The bytes of `wholeKey`, made first, or copied (its first `kept` bytes) when a copy
    /// of this cursor shares it: a key the copy handed out stays as it was while this
    /// cursor moves on. The check runs at every cell: inlined, and handing back the bytes
    /// rather than the buffer, it costs a load and a compare (a call that returned the
    /// buffer cost 30 instructions a cell, and a retain and a release once inlined).
    @inline(__always)
    private mutating func ownKeyBytes(keeping kept: Int) -> UnsafeMutableRawPointer {
        if isKnownUniquelyReferenced(&wholeKey) { return wholeKey.unsafelyUnwrapped.bytes }
        return replaceKeyBuffer(keeping: kept)
    }

    /// `ownKeyBytes`'s rare path: a buffer of the cursor's own.
    private mutating func replaceKeyBuffer(keeping kept: Int) -> UnsafeMutableRawPointer {
        let own = KeyBuffer()
        if let shared = wholeKey { own.bytes.copyMemory(from: shared.bytes, byteCount: kept) }
        wholeKey = own
        return own.bytes
    }

    /// Moves to the next cell in the cursor's direction.
    mutating func advance() throws {
        guard leaf != nil else { return }
        position += reverse ? -1 : 1
        try settle()
    }

    /// Moves past the ends of leaves (empty ones included) until the cursor is on a cell or
    /// past the last leaf.
    private mutating func settle() throws {
        while let current = leaf, position < 0 || position >= current.count {
            guard try nextLeaf() else {
                hold(nil)
                return
            }
        }
    }

    /// Moves to the neighbouring leaf; false at the end of the tree.
    private mutating func nextLeaf() throws -> Bool {
        while !path.isEmpty {
            // The step is moved on where it lies: popped and pushed back, it was copied twice.
            let top = path.count - 1
            path[top].child += reverse ? -1 : 1
            let child = path[top].child
            let branch = path[top].page
            guard child >= 0 && child <= branch.page.count else {
                path.removeLast()
                continue
            }
            var id = try checked(branch) { try $0.child(at: child) }
            while path.count < tree.height - 1 {
                let held = try file.holdPage(id)
                guard held.page.type == .branch else { throw corrupt(file, id, "a leaf above the bottom level") }
                let child = reverse ? held.page.count : 0
                path.append(PathStep(page: held, child: child))
                id = try checked(held) { try $0.child(at: child) }
            }
            // A walk keeps its leaves in the page cache up to a quarter of it, and holds
            // the rest beside it, each once (a bound in the spirit of PostgreSQL's,
            // which gives a scan of a table larger than a quarter of its buffers a small
            // ring of its own): a range of a few leaves, or a whole store whose leaves
            // fit a quarter, stays cached for the next walk, while a scan of a larger
            // store pushes out at most a quarter of what point reads come back to, and
            // takes no fresh memory for each leaf past it (in the first scan of a million
            // keys in compressed leaves, 28 % of the scanning thread's samples were
            // faults on fresh memory; Benchmarks/JOURNAL.md, "Long walks beside the page
            // cache"). The price: a store whose leaves take more than a quarter of the
            // cache is expanded again, past that quarter, by every scan.
            let held = try file.holdPage(id, caching: walkedBytes < file.cache.capacityBytes / 4)
            guard held.page.type == .leaf else { throw corrupt(file, id, "a branch where a leaf belongs") }
            walkedBytes &+= held.owner?.page.bytes.count ?? 0
            hold(held)
            position = reverse ? held.page.count - 1 : 0
            return true
        }
        return false
    }

    /// Runs `body` on a held page, naming the page in a decoding error.
    @inline(__always)
    private func checked<Result>(_ held: HeldPage, _ body: (TreePage) throws -> Result) throws -> Result {
        do { return try body(held.page) } catch let defect as PageDefect { throw file.corrupt(held.id, defect) }
    }
}

/// What finds a key's leaf cell for a point read: a descent from the root, or a finger.
protocol LeafCellFinder {
    mutating func withCell<Result>(_ key: UnsafeRawBufferPointer, _ body: (LeafCell?) throws -> Result) throws -> Result
}

/// `BTree.withCell`, as a `LeafCellFinder`.
struct TreeDescent: LeafCellFinder {
    let tree: BTree
    /// Borrowed from the snapshot that made this descent (its engine holds the file):
    /// held strongly, every point read retained and released the file, an atomic write to
    /// a line every reading thread shares.
    let file: Unmanaged<PageFile>

    @inline(__always)
    func withCell<Result>(_ key: UnsafeRawBufferPointer, _ body: (LeafCell?) throws -> Result) throws -> Result {
        try file._withUnsafeGuaranteedRef { file in try tree.withCell(key, file: file, body) }
    }
}

/// Point lookups made one after another, in ascending key order where they can be: keeps
/// the leaf the last lookup ended in and looks the next key up there, with no descent from
/// the root, when it lies between that leaf's first and last keys (BTree.T2: no other leaf can
/// hold it). A key outside them descends as `withCell` does, so any order is answered
/// correctly; ascending keys that lie close together cost one descent per leaf.
/// The held leaf stays valid while the snapshot that gave the tree lives (PageFile.P1).
struct LeafFinger: LeafCellFinder {
    let tree: BTree
    let file: PageFile
    private var leaf: HeldPage?

    init(tree: BTree, file: PageFile) {
        self.tree = tree
        self.file = file
    }

    /// `BTree.withCell`, from the held leaf when it brackets `key`.
    @inline(__always)
    mutating func withCell<Result>(_ key: UnsafeRawBufferPointer, _ body: (LeafCell?) throws -> Result) throws -> Result {
        // A leaf held from before the store closed is not read (as `withPage` reads none).
        guard !file.isClosed else { throw EngineError.closed }
        if let held = leaf, try brackets(held, key) {
            let cell: LeafCell?
            do { cell = try held.page.leafCell(for: key) } catch { throw file.corrupt(held.id, error) }
            return try body(cell)
        }
        guard tree.root != .none else { return try body(nil) }
        guard tree.height >= 1 else { throw corrupt(file, tree.root, "a tree of height \(tree.height) has a root") }
        var id = tree.root
        for _ in 1..<tree.height {
            id = try file.withPage(id) { page in
                guard page.type == .branch else { throw PageDefect("a leaf above the bottom level") }
                return try page.child(for: key)
            }
        }
        let held = try file.holdPage(id)
        guard held.page.type == .leaf else { throw corrupt(file, id, "a branch where a leaf belongs") }
        leaf = held
        let cell: LeafCell?
        do { cell = try held.page.leafCell(for: key) } catch { throw file.corrupt(id, error) }
        return try body(cell)
    }

    /// Whether `key` lies between the first and last keys of `held` (inclusive).
    @inline(__always)
    private func brackets(_ held: HeldPage, _ key: UnsafeRawBufferPointer) throws -> Bool {
        let page = held.page
        guard page.count > 0 else { return false }
        do {
            guard try page.compareKey(page.count - 1, with: key) >= 0 else { return false }
            return try page.compareKey(0, with: key) <= 0
        } catch {
            throw file.corrupt(held.id, error)
        }
    }
}

/// A cell of a leaf run as `TreeCursor.plainCells` reads it: where its key (the rest after
/// an elided prefix) and its value lie in the leaf.
struct RunCell {
    let keyStart: Int32
    let keyLength: Int32
    let valueStart: Int32
    let valueLength: Int32
}

/// Room for the cells `TreeCursor.plainCells` reads at a time, made once a walk's first
/// leaf run (a short walk makes none).
final class RunCells {
    /// Cells read at a time: a leaf of 4 KiB holds about 30 of 100-byte values.
    static let capacity = 64
    let cells = UnsafeMutablePointer<RunCell>.allocate(capacity: capacity)

    deinit { cells.deallocate() }
}

/// A key put together from a leaf's elided prefix and a cell (`TreeCursor.currentKey`).
final class KeyBuffer {
    let bytes = UnsafeMutableRawPointer.allocate(byteCount: Limits.maxKeyBytes, alignment: 8)

    deinit { bytes.deallocate() }
}

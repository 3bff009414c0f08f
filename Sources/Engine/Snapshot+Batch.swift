// Point reads of many keys at once. In a store larger than the processor's caches each
// read waits on a few cache misses in turn (the memtable's filter word and index slot, then
// a page per level of the tree), and one read after another waits on all of them. Here a
// batch of keys takes each step side by side: every key's memtable lines are prefetched
// before any is probed, and the tree is descended one level at a time for all of them, the
// page each key goes to next prefetched while the others step, so the misses of the batch
// overlap instead of adding up (the memtable's batched inserts do the same: Memtable.swift).

/// Keys for `Snapshot.withValues(forKeys:_:)`, kept one after another in one buffer (no
/// array per key). Reuse one for batch after batch: `removeAll()` keeps its capacity.
///
/// The buffer is grown ahead of the keys and written through a pointer: `Array.append`
/// of two short runs of bytes (a record key is an entity prefix and an id) cost about
/// 450 instructions a key in a record query's profile (callgrind, records-sort-text),
/// more than the rest of the walk that found the key.
///
/// SPI-public rather than `package`, for the records layer's per-key calls: Swift 6.3
/// inlines a `@inlinable` declaration into another module only when it is public (an
/// `@inlinable package` one was called: 166 instructions an append, and a retain and a
/// release of both arrays around each call, in records-range's profile).
@_spi(EngineInlinable) public struct KeyBatch: Sendable {
    /// The keys' bytes in `bytes[0..<used]`; what lies past `used` is room, not keys.
    @usableFromInline var bytes: [UInt8]
    @usableFromInline var used = 0
    /// Where each key ends in `bytes`.
    @usableFromInline var ends: [Int] = []

    /// A batch with room for `keys` keys of `bytes` bytes in all before it grows.
    @_spi(EngineInlinable) public init(keys: Int = 0, bytes: Int = 0) {
        self.bytes = [UInt8](repeating: 0, count: bytes)
        ends.reserveCapacity(keys)
    }

    /// How many keys the batch holds. (Inlinable, as every accessor a query's per-entry
    /// closure calls: a call out retained and released the batch's two arrays around it.)
    @inlinable
    @_spi(EngineInlinable) public var count: Int { ends.count }

    @inlinable
    @_spi(EngineInlinable) public var isEmpty: Bool { ends.isEmpty }

    /// Adds the key made of `prefix` followed by `suffix` (a record key: its entity's
    /// prefix and its id).
    @inlinable
    @_spi(EngineInlinable) public mutating func append(_ prefix: [UInt8], _ suffix: RawSpan) {
        prefix.withUnsafeBytes { prefix in
            suffix.withUnsafeBytes { suffix in append(prefix, suffix) }
        }
    }

    /// Adds `key`.
    @inlinable
    @_spi(EngineInlinable) public mutating func append(_ key: RawSpan) {
        key.withUnsafeBytes { append($0, UnsafeRawBufferPointer(start: nil, count: 0)) }
    }

    /// Adds the key made of `first` followed by `second`.
    @inlinable
    mutating func append(_ first: UnsafeRawBufferPointer, _ second: UnsafeRawBufferPointer) {
        let end = used + first.count + second.count
        if end > bytes.count { bytes.append(contentsOf: repeatElement(0, count: Swift.max(end, 2 * bytes.count) - bytes.count)) }
        bytes.withUnsafeMutableBytes { buffer in
            if let source = first.baseAddress { (buffer.baseAddress! + used).copyMemory(from: source, byteCount: first.count) }
            if let source = second.baseAddress { (buffer.baseAddress! + used + first.count).copyMemory(from: source, byteCount: second.count) }
        }
        used = end
        ends.append(end)
    }

    /// Key `index` (0..<count).
    @inlinable
    @_spi(EngineInlinable) public subscript(index: Int) -> ArraySlice<UInt8> {
        bytes[(index == 0 ? 0 : ends[index - 1])..<ends[index]]
    }

    /// Removes every key, keeping the memory for the next batch.
    @inlinable
    @_spi(EngineInlinable) public mutating func removeAll() {
        used = 0
        ends.removeAll(keepingCapacity: true)
    }
}

extension Snapshot {
    /// Calls `body` with the index of each key of `keys`, the key's bytes and its value
    /// where they lie (nil when the key has none), in the batch's order, until `body`
    /// returns false. Answers exactly what `withValue(forKey:_:)` answers key by key;
    /// faster when the keys lie far apart in a store larger than the caches, as the
    /// lookups of a batch overlap their cache misses. The key and the span are valid only
    /// inside their call. Throws `EngineError` for a corrupt page, or what `body` throws.
    package func withValues(forKeys keys: borrowing KeyBatch,
                            _ body: (_ index: Int, _ key: UnsafeRawBufferPointer, _ value: RawSpan?) throws -> Bool) throws {
        guard !keys.isEmpty else { return }
        try keys.bytes.withUnsafeBytes { bytes in
            try keys.ends.withUnsafeBufferPointer { ends in
                func key(_ index: Int) -> UnsafeRawBufferPointer {
                    let start = index == 0 ? 0 : ends[index - 1]
                    return UnsafeRawBufferPointer(start: bytes.baseAddress.map { $0 + start }, count: ends[index] - start)
                }
                try visitValues(count: ends.count, key: key) { index, value in try body(index, key(index), value?.bytes) }
            }
        }
    }

    /// Keys a batch looks up side by side: as many misses in flight as the processor
    /// tracks, with room to spare (the memtable's batched search measured 16 best).
    package static let batchLanes = 16
    /// Cache lines prefetched of each page a batch goes to: its header and first slots.
    /// Measured on records-sort-text at 1M (Benchmarks/JOURNAL.md): one line beat none by
    /// 15 %; two or four (the rest of a leaf's slots), and prefetching the cells the
    /// slots' hints point at, were not measurably better.
    static let prefetchedPageLines = 1

    /// `withValues` over raw buffers: `key(i)` is key `i` of `count`.
    func visitValues(count: Int, key: (Int) -> UnsafeRawBufferPointer,
                     _ body: (Int, UnsafeRawBufferPointer?) throws -> Bool) throws {
        let file = engine.pageFile
        let tree = state.tree
        let (active, frozen) = (state.active, state.frozen)
        guard tree.root == .none || tree.height >= 1 else { throw corrupt(file, tree.root, "a tree of height \(tree.height) has a root") }
        let levels = tree.root == .none ? 0 : Int(tree.height) - 1
        try withUnsafeTemporaryAllocation(of: Lane.self, capacity: Self.batchLanes) { lanes in
            try withUnsafeTemporaryAllocation(of: Finger.self, capacity: max(levels, 1)) { fingers in
                try withUnsafeTemporaryAllocation(byteCount: max(levels, 1) * Limits.maxKeyBytes, alignment: 8) { bounds in
                    fingers.initialize(repeating: Finger())
                    // The last key the tree answered, for the next to be compared with.
                    var previous: UnsafeRawBufferPointer?
                    for start in stride(from: 0, to: count, by: Self.batchLanes) {
                        let width = min(Self.batchLanes, count - start)
                        // (Each key taken once: `key` is a closure, called, not inlined.)
                        for lane in 0..<width { lanes.initializeElement(at: lane, to: Lane(key: key(start + lane), page: tree.root)) }
                        defer { _ = lanes[0..<width].deinitialize() }
                        // The memtables, as `memtableNode` reads them, in three passes: every
                        // key's filter words start loading; then each key a filter lets through
                        // starts loading its index slot; then those keys are probed. The
                        // misses of a batch overlap, and a key a memtable lacks (most, in a
                        // store larger than its memtable) loads no slot of its index.
                        let inActive = !active.isEmpty
                        let inFrozen = frozen.map { !$0.isEmpty } ?? false
                        if inActive || inFrozen {
                            for lane in 0..<width {
                                let hash = hashKey(lanes[lane].key)
                                lanes[lane].hash = hash
                                if inActive { active.prefetchFilter(hash) }
                                if inFrozen { frozen.unsafelyUnwrapped.prefetchFilter(hash) }
                            }
                            for lane in 0..<width {
                                let hash = lanes[lane].hash
                                lanes[lane].mayBeActive = inActive && active.mayHold(hash)
                                lanes[lane].mayBeFrozen = inFrozen && frozen.unsafelyUnwrapped.mayHold(hash)
                            }
                            let version = state.version
                            for lane in 0..<width where lanes[lane].mayBeActive || lanes[lane].mayBeFrozen {
                                let (key, hash) = (lanes[lane].key, lanes[lane].hash)
                                var node = lanes[lane].mayBeActive ? active.newestNode(key, hash: hash, at: version) : nil
                                if node == nil && lanes[lane].mayBeFrozen { node = frozen.unsafelyUnwrapped.newestNode(key, hash: hash, at: version) }
                                lanes[lane].node = node
                            }
                        }
                        // The tree, one level at a time: each key's next page is prefetched
                        // while the other keys take their step. Keys in order, as an index's
                        // record ids, most often take the branch's child the key before
                        // took, or the next: a key at or past the key before it (of those
                        // the tree answers) that goes through the same branch takes that
                        // key's child when it is below the bound above that child (the
                        // branch is not read again), and else searches from that child on.
                        if levels > 0 {
                            for lane in 0..<width where lanes[lane].node == nil {
                                lanes[lane].ascending = previous.map { compareBytes(lanes[lane].key, $0) >= 0 } ?? false
                                previous = lanes[lane].key
                            }
                        }
                        for level in 0..<levels {
                            let bound = bounds.baseAddress! + level * Limits.maxKeyBytes
                            for lane in 0..<width where lanes[lane].node == nil {
                                let page = lanes[lane].page
                                let key = lanes[lane].key
                                let finger = fingers[level]
                                var from = 0
                                if lanes[lane].ascending && page == finger.page {
                                    if finger.boundBytes >= 0 {
                                        if compareBytes(key, UnsafeRawBufferPointer(start: bound, count: finger.boundBytes)) < 0 {
                                            lanes[lane].page = finger.childPage
                                            continue
                                        }
                                        from = finger.child + 1
                                    } else {
                                        from = finger.child
                                    }
                                }
                                let (child, index, boundBytes) = try file.withPage(page) { page in
                                    guard page.type == .branch else { throw PageDefect("a leaf above the bottom level") }
                                    let index = try page.childIndex(for: key, from: from)
                                    var copied = -1
                                    if index < page.count, let separator = try page.separator(index), let base = separator.baseAddress {
                                        copyKeyBytes(to: bound, from: base, count: separator.count)
                                        copied = separator.count
                                    }
                                    return (try page.child(at: index), index, copied)
                                }
                                lanes[lane].page = child
                                fingers[level] = Finger(page: page, child: index, childPage: child, boundBytes: boundBytes)
                                file.prefetch(child, lines: Self.prefetchedPageLines)
                            }
                        }
                        // The values, in order.
                        for lane in 0..<width {
                            let index = start + lane
                            // nil: the key has no value, which `body` hears of too.
                            let answered: Bool?
                            if let node = lanes[lane].node {
                                answered = try body(index, node.value)
                            } else {
                                var leaf = KnownLeaf(id: lanes[lane].page, file: file)
                                answered = try withTreeValue(lanes[lane].key, { try body(index, $0) }, cells: &leaf)
                            }
                            guard try answered ?? body(index, nil) else { return }
                        }
                    }
                }
            }
        }
    }
}

/// Where the last key through one level of the tree went, kept from key to key (and
/// batch to batch) of a batched read: the branch it went through, the child it took and
/// that child's page, and the length of the bound above that child (copied beside the
/// finger: a cached page may go while the other keys step), -1 when it has none.
private struct Finger {
    var page = PageID.none
    var child = 0
    var childPage = PageID.none
    var boundBytes = -1
}

/// One key of a batch on its way: its bytes, what the memtables hold for it, else the
/// page of the tree it has reached, and whether it is at or past the key before it that
/// the tree answers (which may be in the batch before).
private struct Lane {
    let key: UnsafeRawBufferPointer
    var node: MemtableNode?
    var page: PageID
    var ascending = false
    /// The key's `hashKey`, and whether the active and the frozen memtable's filters let it
    /// through, for the memtables' passes.
    var hash: UInt64 = 0
    var mayBeActive = false
    var mayBeFrozen = false

    init(key: UnsafeRawBufferPointer, page: PageID) {
        self.key = key
        self.page = page
    }
}

/// The leaf a batch's descent found for a key (`PageID.none` for an empty tree), as a
/// `LeafCellFinder`.
private struct KnownLeaf: LeafCellFinder {
    let id: PageID
    let file: PageFile

    @inline(__always)
    func withCell<Result>(_ key: UnsafeRawBufferPointer, _ body: (LeafCell?) throws -> Result) throws -> Result {
        guard id != .none else { return try body(nil) }
        return try file.withLeafCell(id, key, body)
    }
}

@testable import StrataEngine
import StrataFileIO
import Testing

/// How the tree writer lays leaves out: appended keys pack leaves full; a split among a
/// leaf's keys spreads its entries evenly with room to spare, instead of a full page and a
/// nearly empty one that the next insert splits again.
@Suite struct TreeWriterLayoutTests {
    private func writer(_ pageFile: PageFile, generation: UInt64, pageCount: UInt64) -> TreeWriter {
        TreeWriter(file: pageFile, generation: generation, purgeTombstonesThrough: 0,
                   allocator: PageAllocator(reusable: [], pageCount: pageCount))
    }

    private func change(_ index: Int) -> (key: [UInt8], entry: MemtableEntry) {
        let key = Array("key\(String(index + 100_000))".utf8)
        return (key, MemtableEntry(version: 1, value: [UInt8](repeating: 7, count: 100)))
    }

    /// The changes as the tree writer takes them: the nodes of a memtable holding them
    /// (kept alive by the caller).
    private func nodes(_ changes: [(key: [UInt8], entry: MemtableEntry)], in memtable: Memtable) -> [MemtableNode] {
        memtable.linkReplayed(changes)
        var iterator = memtable.entries(from: nil, reverse: false)
        var result: [MemtableNode] = []
        while let node = iterator.nextNode() { result.append(node) }
        return result
    }

    /// The bytes each leaf of `tree` uses, left to right.
    private func leafFill(_ tree: BTree, _ pageFile: PageFile) throws -> [Int] {
        guard case let .branch(children) = try pageFile.node(tree.root) else { return [] }
        return try children.map { child in
            guard case let .leaf(entries) = try pageFile.node(child.child) else { return 0 }
            return entries.reduce(0) { $0 + $1.cellBytes }
        }
    }

    @Test func appendedKeysPackLeavesFullAndAnInsertAmongKeysSplitsEvenly() throws {
        let fileSystem = SimulatedFileSystem()
        try fileSystem.createDirectory("/t")
        let pageFile = try PageFile(path: "/t/data", file: try fileSystem.open("/t/data", options: [.create, .write]),
                                pageBytes: 4096, cachePages: 64)
        let capacity = 4096 - PageHeader.bytes
        let cell = LeafEntry(key: change(0).key, version: 1, payload: .inline(change(0).entry.value ?? [])).cellBytes
        // 100 entries in key order, then 100 more after them: every leaf but the last full.
        var first = writer(pageFile, generation: 1, pageCount: 2)
        let memtables = [Memtable(), Memtable(), Memtable()]
        var tree = try first.apply(nodes((0..<100).map { change($0 * 2) }, in: memtables[0]), to: .empty)
        var second = writer(pageFile, generation: 2, pageCount: first.allocator.pageCount)
        tree = try second.apply(nodes((100..<200).map { change($0 * 2) }, in: memtables[1]), to: tree)
        var fill = try leafFill(tree, pageFile)
        #expect(fill.count > 3 && fill.dropLast().allSatisfy { capacity - $0 < cell }, "\(fill)")

        // One key among the keys of the first (full) leaf: two leaves of about half each.
        var third = writer(pageFile, generation: 3, pageCount: second.allocator.pageCount)
        tree = try third.apply(nodes([change(1)], in: memtables[2]), to: tree)
        let before = fill
        fill = try leafFill(tree, pageFile)
        #expect(fill.count == before.count + 1)
        let (left, right) = (fill[0], fill[1])
        #expect(abs(left - right) <= cell && left + right == before[0] + cell, "\(fill.prefix(3))")
        #expect(fill.dropFirst(2).elementsEqual(before.dropFirst()), "the other leaves are untouched")
        withExtendedLifetime(memtables) {}  // the writer read their nodes in place
    }

    /// Leaves side by side that all take changes are rewritten in groups of at most
    /// `maxGroupLeaves`: a checkpoint holds one group's pages and cells at a time, not a
    /// whole branch's. Every key is found where it belongs afterwards, whether a group
    /// ended at the cap, at an unchanged leaf, or at the branch's last child.
    @Test func aBranchOfLeavesThatAllTakeChangesIsRewrittenInBoundedGroups() throws {
        let fileSystem = SimulatedFileSystem()
        try fileSystem.createDirectory("/t")
        let pageFile = try PageFile(path: "/t/data", file: try fileSystem.open("/t/data", options: [.create, .write]),
                                pageBytes: 4096, cachePages: 256)
        // Keys in order: full leaves, all under the root.
        var first = writer(pageFile, generation: 1, pageCount: 2)
        let memtables = [Memtable(), Memtable()]
        let loaded = (0..<4_000).map { change($0 * 2) }
        var tree = try first.apply(nodes(loaded, in: memtables[0]), to: .empty)
        guard case let .branch(children) = try pageFile.node(tree.root) else { Issue.record("no branch at the root"); return }
        #expect(tree.height == 2 && children.count > 3 * TreeWriter.maxGroupLeaves, "\(tree.height) levels, \(children.count) leaves")

        // A key into every leaf, right after its first, but one: the leaves after it, twice
        // the cap, end the branch, so a group ends at the cap on its last child.
        let skipped = children.count - 2 * TreeWriter.maxGroupLeaves - 1
        var inserted: [(key: [UInt8], entry: MemtableEntry)] = []
        for (index, child) in children.enumerated() where index != skipped {
            guard case let .leaf(entries) = try pageFile.node(child.child) else { Issue.record("a branch below the root"); return }
            inserted.append((entries[0].key + [0], MemtableEntry(version: 2, value: [UInt8](repeating: 8, count: 100))))
        }
        var second = writer(pageFile, generation: 2, pageCount: first.allocator.pageCount)
        tree = try second.apply(nodes(inserted, in: memtables[1]), to: tree)
        #expect(second.largestGroupLeaves == TreeWriter.maxGroupLeaves)

        // Every key, in order, each leaf within its branch entry's bounds.
        guard case let .branch(rewritten) = try pageFile.node(tree.root) else { Issue.record("no branch at the root"); return }
        var keys: [[UInt8]] = []
        for (index, child) in rewritten.enumerated() {
            guard case let .leaf(entries) = try pageFile.node(child.child) else { Issue.record("a branch below the root"); return }
            let upper = index + 1 < rewritten.count ? rewritten[index + 1].key : nil
            #expect(entries.allSatisfy { index == 0 || compareKeys($0.key, child.key) >= 0 })
            #expect(entries.allSatisfy { entry in upper.map { compareKeys(entry.key, $0) < 0 } ?? true })
            keys += entries.map(\.key)
        }
        let expected = (loaded.map(\.key) + inserted.map(\.key)).sorted { compareKeys($0, $1) < 0 }
        #expect(keys == expected)
        withExtendedLifetime(memtables) {}
    }
}

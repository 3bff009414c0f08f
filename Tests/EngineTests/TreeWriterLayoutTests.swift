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
}

import StrataFileIO
import Testing
import StrataWAL
@testable import StrataEngine

/// Checkpoints that fold more changes into one leaf than `TreeWriter.mergePieceChanges`
/// (the first checkpoint of a store, sequential inserts past the last key, a bulk load
/// among a few keys) merge and write them piece by piece: the tree holds exactly the
/// model's pairs, verifies, and its leaves are as full as one pass would make them.
@Suite struct LargeCheckpointTests {
    private static let count = 3 * TreeWriter.mergePieceChanges + 123

    private func key(_ number: Int) -> [UInt8] { Array("key\(String(number + 100_000_000).dropFirst())".utf8) }

    /// Commits `numbers` (in that order, 1,000 per batch) with values derived from `seed`,
    /// deleting every seventh of them again in the same run.
    private func load(_ engine: StorageEngine, _ numbers: [Int], model: inout [[UInt8]: [UInt8]], seed: UInt64) throws {
        var random = SplitMix64(seed: seed)
        for start in stride(from: 0, to: numbers.count, by: 1_000) {
            var batch = WALBatch()
            for number in numbers[start..<min(numbers.count, start + 1_000)] {
                let value = (0..<Int(random.next() % 90 + 10)).map { _ in UInt8(truncatingIfNeeded: random.next()) }
                batch.put(key(number), value)
                model[key(number)] = value
            }
            try engine.commit(batch)
        }
        var deletes = WALBatch()
        for number in numbers where number % 7 == 0 {
            deletes.delete(key(number))
            model[key(number)] = nil
        }
        try engine.commit(deletes)
    }

    private func check(_ engine: StorageEngine, _ model: [[UInt8]: [UInt8]], fill: Int) throws {
        try engine.checkpoint()
        let report = engine.verify()
        #expect(report.isValid, "\(report)")
        #expect(report.keys == model.count && report.tombstones == 0)
        let pairs = try engine.snapshot().scan()
        #expect(pairs.count == model.count)
        #expect(Dictionary(uniqueKeysWithValues: pairs.map { ($0.key, $0.value) }) == model)
        // As full as one pass packs them: leaves filled in key order until the next cell
        // would not fit or the leaf reached the target (16/16 of the page, or 15/16),
        // counting each key without the prefix the leaf's keys share (stored once).
        let capacity = PageCodec.hintedCapacity(pageBytes: engine.pageFile.pageBytes)
        let target = capacity * fill / 16
        let version = engine.version
        var leaves = 0
        var used = 0
        var count = 0
        var prefix = 0
        var first: [UInt8] = []
        for (key, value) in model.sorted(by: { compareKeys($0.key, $1.key) < 0 }) {
            let cell = LeafEntry(key: key, version: version, payload: .inline(value)).cellBytes
            if count > 0 {
                let shared = min(prefix, zip(first, key).prefix { $0 == $1 }.count)
                if used - (count - 1) * prefix < target && used + cell - count * shared <= capacity {
                    (used, count, prefix) = (used + cell, count + 1, shared)
                    continue
                }
                leaves += 1
            }
            (first, used, count, prefix) = (key, cell, 1, key.count)
        }
        #expect(report.leafPages == leaves + (count > 0 ? 1 : 0))
    }

    private func engine() throws -> StorageEngine {
        var options = EngineOptions()
        options.checkpointMemtableBytes = 1 << 30
        return try StorageEngine.open(path: "/db", fileSystem: SimulatedFileSystem(), options: options).engine
    }

    @Test func theFirstCheckpointOfAStoreFillsItsLeaves() throws {
        let engine = try engine()
        var model: [[UInt8]: [UInt8]] = [:]
        var random = SplitMix64(seed: 41)
        try load(engine, (0..<Self.count).shuffled(using: &random), model: &model, seed: 1)
        try check(engine, model, fill: 16)
        try engine.close()
    }

    @Test func sequentialInsertsPastTheLastKeyFillTheirLeaves() throws {
        let engine = try engine()
        var model: [[UInt8]: [UInt8]] = [:]
        try load(engine, Array(0..<1_000), model: &model, seed: 2)
        try engine.checkpoint()
        try load(engine, Array(1_000..<(1_000 + Self.count)), model: &model, seed: 3)
        try check(engine, model, fill: 16)
        try engine.close()
    }

    /// Changes among the keys of a one-leaf tree split it into leaves filled to 15/16.
    @Test func aBulkLoadAmongAFewKeysLeavesRoomInItsLeaves() throws {
        let engine = try engine()
        var model: [[UInt8]: [UInt8]] = [:]
        try load(engine, [1, 2, 3 * Self.count + 1], model: &model, seed: 4)
        #expect(model.count == 3)
        try engine.checkpoint()
        var random = SplitMix64(seed: 42)
        try load(engine, (4..<(3 * Self.count)).filter { $0 % 3 == 0 }.shuffled(using: &random), model: &model, seed: 5)
        try check(engine, model, fill: TreeWriter.splitFill.numerator)
        try engine.close()
    }
}

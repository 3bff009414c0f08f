import Strata
import StrataTesting
import Testing
@testable import StrataContexts

/// A context with writes staged counts a range from its snapshot's count and its staged
/// writes alone (`Context.countKeys`): the count is what a walk of what the context sees
/// returns. Staged puts of new keys and of keys the snapshot holds, staged deletes of held
/// keys and of keys it lacks, at the context's own level and at its ancestors' (a nearer
/// level's write of a key winning), inside and outside random ranges, whole and up to
/// random limits; the snapshot's pairs in the tree and in the memtable.
@Suite struct StagedCountTests {
    @Test(arguments: [UInt64(0x5_7A6E), 0xC0_0B7])
    func aCountWithWritesStagedIsWhatAWalkSees(seed: UInt64) throws {
        print("aCountWithWritesStagedIsWhatAWalkSees seed \(seed)")
        var random = SplitMix64(seed: seed)
        var options = EngineOptions()
        options.idleCheckpointDelay = nil   // the test checkpoints when it means to
        let store = try Store.inMemory(options: options)
        defer { try? store.close() }
        let keys = 3_000
        func key(_ number: Int) -> [UInt8] { bytes(String(format: "k%05d", number)) }
        // Every other key committed: half checkpointed into the tree, half in the memtable.
        try store.write { unit in
            for number in stride(from: 0, to: keys, by: 4) { try unit.put(key(number), [1]) }
        }
        try store.checkpoint()
        try store.write { unit in
            for number in stride(from: 2, to: keys, by: 4) { try unit.put(key(number), [2]) }
        }
        /// Stages random puts and deletes of keys held and not held in `context`.
        func stage(_ context: Context, writes: Int) throws {
            for _ in 0..<writes {
                let number = Int(random.next() % UInt64(keys + 200))
                if random.next() % 3 == 0 { try context.delete(key(number)) } else { try context.put(key(number), [3]) }
            }
        }
        /// Checks random ranges of `context` against a walk of it.
        func check(_ context: Context, _ label: String) throws {
            for trial in 0..<80 {
                let lower = trial % 5 == 0 ? nil : key(Int(random.next() % UInt64(keys + 250)))
                let upper = trial % 6 == 0 ? nil : key(Int(random.next() % UInt64(keys + 250)))
                let walked = try context.scan(from: lower, to: upper).count
                let trialLabel = "seed \(seed), \(label), trial \(trial)"
                #expect(try context.countKeys(from: lower, to: upper) == walked, "\(trialLabel): count")
                let limit = 1 + Int(random.next() % UInt64(walked + 2))
                #expect(try context.countKeys(from: lower, to: upper, limit: limit) == min(limit, walked),
                        "\(trialLabel): count up to \(limit)")
            }
        }
        let parent = store.makeContext()
        try stage(parent, writes: 300)
        try check(parent, "the parent")
        let child = try parent.makeChild()
        try stage(child, writes: 200)
        try check(child, "a child over its parent's writes")
        let grandchild = try child.makeChild()
        // Keys its ancestors wrote, written again the other way.
        for number in stride(from: 0, to: keys, by: 7) {
            if try child.get(key(number)) == nil { try grandchild.put(key(number), [4]) } else { try grandchild.delete(key(number)) }
        }
        try check(grandchild, "a grandchild over both")
        grandchild.discard()
        child.discard()
        parent.discard()
    }
}

import StrataFileIO
import Testing
import StrataEngine
@testable import StrataContexts

/// PersistentSortedMap.swift: updates change unshared nodes in place (PersistentSortedMap.M3), yet every copy
/// of a map taken along the way, and every iterator made from one, keeps exactly what the
/// map held when it was taken.
@Suite struct PersistentSortedMapTests {
    @Test(arguments: [UInt64(1), 2, 3])
    func copiesKeepWhatTheyHeldWhileTheMapChangesInPlace(seed: UInt64) {
        print("PersistentSortedMapTests seed \(seed)")
        var random = SplitMix64(seed: seed)
        var map = PersistentSortedMap<Int>()
        var model: [[UInt8]: Int] = [:]
        var copies: [(map: PersistentSortedMap<Int>, model: [[UInt8]: Int])] = []
        var iterators: [(iterator: PersistentSortedMap<Int>.Iterator, expected: [[UInt8]])] = []
        func sortedKeys(_ model: [[UInt8]: Int]) -> [[UInt8]] { model.keys.sorted { compareKeys($0, $1) < 0 } }
        for step in 0..<4_000 {
            let key = Array(String(random.next() % 1_500).utf8)
            let value = Int(random.next() % 1_000_000)
            let replaced = map.updateValue(value, forKey: key)
            #expect(replaced == model[key], "seed \(seed), step \(step)")
            model[key] = value
            if random.next() % 200 == 0 { copies.append((map, model)) }
            if random.next() % 400 == 0 { iterators.append((map.entries(), sortedKeys(model))) }
        }
        #expect(map.checkInvariants() && map.count == model.count)
        #expect(sortedKeys(model).allSatisfy { map[$0] == model[$0] })
        #expect(!copies.isEmpty && !iterators.isEmpty)
        for (copy, held) in copies {
            #expect(copy.checkInvariants() && copy.count == held.count, "seed \(seed)")
            var walked: [([UInt8], Int)] = []
            var iterator = copy.entries()
            while let next = iterator.next() { walked.append((next.key, next.value)) }
            #expect(walked.map(\.0) == sortedKeys(held) && walked.allSatisfy { held[$0.0] == $0.1 }, "seed \(seed)")
        }
        for (iterator, expected) in iterators {
            var iterator = iterator
            var keys: [[UInt8]] = []
            while let next = iterator.next() { keys.append(next.key) }
            #expect(keys == expected, "seed \(seed)")
        }
    }
}

// docs/Durability.md's example of plugging a workload of one's own into the crash harness, run
// as written.
import StrataTesting
import Testing

struct CheckoutWorkload: CrashWorkload {
    var name: String { "checkout" }
    var stepCount: Int { 100 }

    func setUp(_ store: Store) throws {
        try store.write { try $0.put(Array("stock".utf8), Array("1000".utf8)) }
    }

    // One use case per step: take an item from stock and record the order, as one unit.
    func run(step index: Int, on store: Store, random: inout SplitMix64) throws {
        let quantity = Int(random.next() % 3) + 1
        try store.write { unit in
            let stock = Int(String(decoding: try unit.get(Array("stock".utf8))!, as: UTF8.self))!
            try unit.put(Array("stock".utf8), Array("\(stock - quantity)".utf8))
            try unit.put(Array("order/\(index)".utf8), Array("\(quantity)".utf8))
        }
    }

    // What must hold after any crash: stock plus ordered items is what we started with.
    func checkInvariant(_ store: Store) throws {
        let context = store.makeContext()
        guard let stock = try context.get(Array("stock".utf8)) else { return }  // never set up
        let ordered = try context.scan(prefix: Array("order/".utf8))
            .reduce(0) { $0 + Int(String(decoding: $1.value, as: UTF8.self))! }
        guard Int(String(decoding: stock, as: UTF8.self))! + ordered == 1000 else {
            throw WorkloadViolation("stock and orders do not add up")
        }
    }
}

@Suite struct ReadmeWorkloadTests {
    @Test func readmeWorkloadPassesEverySimulatedSuite() {
        var harness = CrashHarness(workload: CheckoutWorkload())
        harness.seeds = [1, 2]
        harness.sampleLimit = 25         // crash points (or flipped bytes) per suite and seed; nil: all
        for suite in [CrashMode.sim, .recovery, .torn, .errors, .bitflip] {
            let result = harness.run(suite)
            #expect(result.statesExplored > 0)
            #expect(result.failures.isEmpty, "\(result.failures)")
        }
    }
}

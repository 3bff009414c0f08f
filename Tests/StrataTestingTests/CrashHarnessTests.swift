@testable import StrataTesting
import Testing

/// A user's workload with a bug: a transfer made of two units of work, so a crash
/// between them loses money. The harness must catch it.
struct TwoStepTransferWorkload: CrashWorkload {
    var name: String { "two-step" }
    var stepCount: Int { 40 }

    func setUp(_ store: Store) throws {
        try store.write { unit in
            for account in 0..<4 { try unit.put(Array("acct/\(account)".utf8), Array("100".utf8)) }
        }
    }

    func run(step index: Int, on store: Store, random: inout SplitMix64) throws {
        let from = Int(random.next() % 4)
        let to = (from + 1) % 4
        try store.write { unit in try Self.add(-5, to: from, in: unit) }
        try store.write { unit in try Self.add(5, to: to, in: unit) }
    }

    static func add(_ amount: Int, to account: Int, in unit: UnitOfWork) throws {
        let key = Array("acct/\(account)".utf8)
        let balance = Int(String(decoding: try unit.get(key) ?? [], as: UTF8.self)) ?? 0
        try unit.put(key, Array("\(balance + amount)".utf8))
    }

    func checkInvariant(_ store: Store) throws {
        let context = store.makeContext()
        let total = try (0..<4).reduce(0) { sum, account in
            sum + (Int(String(decoding: try context.get(Array("acct/\(account)".utf8)) ?? [], as: UTF8.self)) ?? 0)
        }
        guard total == 400 || total == 0 else { throw WorkloadViolation("the accounts hold \(total), not 400") }
    }
}

/// W1 on a store that keeps history from the start (FORMAT.md, "History"): checkpoints move
/// released segments into `wal/history/`. After every recovery the history must read back
/// from its oldest version, or say plainly that part of it is gone (a crash between the
/// move's directory syncs may lose a segment history held).
struct HistoryWorkload: CrashWorkload {
    let w1 = W1Workload(commits: 60)
    var name: String { "history" }
    var stepCount: Int { w1.stepCount }
    var checkpointInterval: Int { 10 }

    func run(step index: Int, on store: Store, random: inout SplitMix64) throws {
        try w1.run(step: index, on: store, random: &random)
    }

    func checkInvariant(_ store: Store) throws {
        let oldest = try store.oldestHistoryVersion
        guard oldest > 0, oldest <= store.version else { return }
        // The feed reads its history before it returns: damage or a missing segment throws.
        do { _ = try store.changes(after: oldest - 1) } catch EngineError.historyUnavailable {}
    }
}

@Suite struct CrashHarnessTests {
    @Test(arguments: [CrashMode.sim, .torn])
    func historyMovesSurviveEveryCrash(suite: CrashMode) throws {
        var options = EngineOptions()
        options.log.firstSegmentBytes = 4 << 10
        options.log.segmentBytes = 16 << 10
        options.log.history = HistoryRetention(start: .immediately)
        var harness = CrashHarness(workload: HistoryWorkload(), options: options)
        harness.seeds = [4]
        harness.sampleLimit = 40
        let result = harness.run(suite)
        print("history \(suite.rawValue) seed 4: K=\(result.operations), \(result.statesExplored) states, \(result.failures.count) failures")
        #expect(result.statesExplored > 0)
        #expect(result.failures.isEmpty, "\(result.failures.prefix(3).map(\.description))")
    }

    @Test(arguments: ["w1", "kv", "bank", "outbox"], [CrashMode.sim, .torn, .errors, .bitflip])
    func builtInWorkloadsPassEverySuite(workload name: String, suite: CrashMode) throws {
        let workload = try #require(builtInWorkload(named: name, steps: 30))
        var harness = CrashHarness(workload: workload)
        harness.seeds = [5]
        harness.sampleLimit = suite == .errors ? 12 : 60
        let result = harness.run(suite)
        print("\(name) \(suite.rawValue) seed \(harness.seeds[0]): K=\(result.operations), \(result.statesExplored) states, \(result.failures.count) failures, \(result.seconds) s")
        #expect(result.statesExplored > 0 && result.operations > 0)
        #expect(result.failures.isEmpty, "\(result.failures.prefix(3).map(\.description))")
        #expect(result.passed == result.statesExplored)
    }

    /// The outbox workload's invariant fails when an event is published after its unit
    /// instead of in it: a crash between the two loses the event.
    @Test func harnessCatchesAnEventPublishedAfterItsUnit() throws {
        var workload = OutboxWorkload(orders: 12)
        workload.publishesAfterTheUnit = true
        var harness = CrashHarness(workload: workload)
        harness.seeds = [3]
        let result = harness.run(.sim)
        print("outbox, published after the unit, sim seed 3: \(result.failures.count) failures of \(result.statesExplored) states")
        let failure = try #require(result.failures.first)
        #expect(failure.detail.contains("not the shipped"))
    }

    @Test func harnessCatchesAUseCaseSplitAcrossTwoUnitsOfWork() throws {
        var harness = CrashHarness(workload: TwoStepTransferWorkload())
        harness.seeds = [2]
        let result = harness.run(.sim)
        #expect(!result.failures.isEmpty, "a crash between the two units must break the invariant")
        let failure = try #require(result.failures.first)
        #expect(failure.detail.contains("invariant"))
        #expect(failure.replay.hasPrefix("strata crashtest --workload two-step --mode sim --seeds 2 --op "))
        // The replay command's operation reproduces the failure on its own.
        let operation = Int(failure.replay.split(separator: " ").last!)!
        var replay = harness
        replay.onlyOperation = operation
        let again = replay.run(.sim)
        #expect(again.statesExplored > 0 && !again.failures.isEmpty)
    }

    /// The harness's suites at their CI size (docs/Durability.md, "What the tests run in CI") (the `strata crashtest` command
    /// runs them larger): W1 of 200 commits with every operation crashed under 8 fates;
    /// recovery crashed at every operation for one crash state in ten; every operation
    /// torn three ways; the full fault matrix on 30 commits; 5,000 flipped bytes.
    @Test(arguments: [CrashMode.sim, .recovery, .torn, .errors, .bitflip])
    func suitesAtCISizeFindNothing(suite: CrashMode) throws {
        let commits = suite == .errors || suite == .bitflip ? 30 : 200
        var harness = CrashHarness(workload: W1Workload(commits: commits))
        harness.seeds = [1]
        if suite == .bitflip { harness.sampleLimit = 5_000 }
        let result = harness.run(suite)
        print("CI size \(suite.rawValue): W1 of \(commits) commits, K=\(result.operations), \(result.statesExplored) states, "
              + "\(result.failures.count) failures, \(String(format: "%.1f", result.seconds)) s")
        #expect(result.statesExplored > 0)
        #expect(result.failures.isEmpty, "\(result.failures.prefix(3).map(\.description))")
    }

    @Test func harnessCatchesACommitAcknowledgedBeforeItsFdatasync() throws {
        // `.relaxed` acknowledges after the write: a power loss may take acknowledged
        // commits, which the harness must report as I1 failures (a process kill may not).
        var harness = CrashHarness(workload: W1Workload(commits: 30), options: EngineOptions(durability: .relaxed))
        harness.seeds = [3]
        let result = harness.run(.sim)
        #expect(result.failures.contains { $0.detail.contains("I1") && $0.detail.contains("power loss") })
        #expect(!result.failures.contains { $0.detail.contains("process kill") })
    }

    @Test func sampleSpreadsOperationsEvenly() {
        var harness = CrashHarness(workload: W1Workload(commits: 1))
        #expect(harness.sample(5) == [0, 1, 2, 3, 4])
        harness.sampleLimit = 4
        #expect(harness.sample(100) == [0, 25, 50, 75])
        harness.onlyOperation = 7
        #expect(harness.sample(100) == [7])
        #expect(harness.sample(5).isEmpty)
    }
}

// A producer and a consumer of the outbox in one process (Tests/OutboxProcess), killed
// with SIGKILL at random moments again and again, then drained: every acknowledged
// order's event is delivered at least once, none that was never committed, in order,
// and none at or before a position the consumer acknowledged.
import Foundation
import Strata
import StrataTesting
import TestBackends
import Testing

@Suite struct OutboxKillTests {
    static let executable = builtExecutable("OutboxProcess")

    /// One run's log lines, split at each process's `start`.
    struct Run {
        var attempted: [Int] = []
        var produced: [Int] = []
        var delivered: [Int] = []
        var acknowledged: [Int] = []
        var committed: Int?
    }

    static func runs(in log: String) -> [Run] {
        var runs: [Run] = []
        for line in log.split(separator: "\n") {
            let parts = line.split(separator: " ")
            if parts.first == "start" { runs.append(Run()); continue }
            guard parts.count == 2, let number = Int(parts[1]), !runs.isEmpty else { continue }
            switch parts[0] {
            case "T": runs[runs.count - 1].attempted.append(number)
            case "P": runs[runs.count - 1].produced.append(number)
            case "D": runs[runs.count - 1].delivered.append(number)
            case "A": runs[runs.count - 1].acknowledged.append(number)
            case "C": runs[runs.count - 1].committed = number
            default: break
            }
        }
        return runs
    }

    /// Starts the process after a `start` line in the log (written here, so a process
    /// killed before it logged anything still begins a run of its own).
    func start(_ mode: String, store: String, log: String) throws -> Process {
        let handle = try #require(FileHandle(forWritingAtPath: log))
        handle.seekToEndOfFile()
        handle.write(Data("start\n".utf8))
        try handle.close()
        let process = Process()
        process.executableURL = Self.executable
        process.arguments = [store, log, mode]
        try process.run()
        return process
    }

    /// Waits until the log's last run has an acknowledgement line; false when `process`
    /// exits or `seconds` pass first.
    static func waitForAcknowledgement(in log: String, of process: Process, seconds: Double) throws -> Bool {
        let deadline = Date(timeIntervalSinceNow: seconds)
        while Date() < deadline && process.isRunning {
            let text = try String(contentsOfFile: log, encoding: .utf8)
            if let run = runs(in: text).last, !run.acknowledged.isEmpty { return true }
            Thread.sleep(forTimeInterval: 0.05)
        }
        return false
    }

    @Test func killedProducersAndConsumersLoseNoEventAndRepeatNoAcknowledgedOne() throws {
        let seed = UInt64.random(in: 1...UInt64(UInt32.max))
        print("OutboxKillTests seed \(seed)")
        var random = SplitMix64(seed: seed)
        let directory = NSTemporaryDirectory() + "strata-outbox-kill-\(UUID().uuidString)"
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let (store, log) = (directory + "/store", directory + "/log")
        #expect(FileManager.default.createFile(atPath: log, contents: nil))
        let cycles = 20
        for cycle in 0..<cycles {
            let process = try start("run", store: store, log: log)
            // Odd runs die at a random moment from their start, which may come before the
            // store is open. Even runs die at a random moment after their first logged
            // acknowledgement: timed from the start, a loaded machine (the whole suite on
            // two cores) let runs die before they had acknowledged anything.
            if cycle.isMultiple(of: 2) {
                let acknowledged = try Self.waitForAcknowledgement(in: log, of: process, seconds: 120)
                #expect(acknowledged, "run \(cycle) exited, or 120 s passed, before it acknowledged an event")
                Thread.sleep(forTimeInterval: Double(random.next() % 400) / 1000)
            } else {
                Thread.sleep(forTimeInterval: 0.05 + Double(random.next() % 800) / 1000)
            }
            // (A run that exited by itself was reaped: its process ID may be another's now.)
            if process.isRunning { kill(process.processIdentifier, SIGKILL) }
            process.waitUntilExit()
            #expect(process.terminationReason == .uncaughtSignal, "the process ended before it was killed (status \(process.terminationStatus))")
        }
        let drain = try start("drain", store: store, log: log)
        drain.waitUntilExit()
        #expect(drain.terminationStatus == 0)
        let text = try String(contentsOfFile: log, encoding: .utf8)
        #expect(text.hasSuffix("drained\n"))
        let runs = Self.runs(in: text)
        try #require(runs.count == cycles + 1)
        let produced = runs.flatMap(\.produced)
        let delivered = Set(runs.flatMap(\.delivered))
        #expect(produced.count > cycles, "too few orders to test anything: \(produced.count)")
        #expect(runs.dropLast().filter { !$0.acknowledged.isEmpty }.count >= cycles / 2,
                "fewer than half the runs acknowledged an event before the kill")
        // Orders are numbered by commit: 0 to committed − 1 exist, and each acknowledged one among them.
        let committed = try #require(runs.last?.committed)
        #expect(produced.allSatisfy { $0 < committed }, "an acknowledged order is missing from the store")
        // At least once: every committed order's event was delivered, acknowledged or not.
        let lost = (0..<committed).filter { !delivered.contains($0) }
        #expect(lost.isEmpty, "committed orders whose events were never delivered: \(lost.prefix(10))")
        // Never an event of a unit that did not commit.
        #expect(delivered.allSatisfy { $0 < committed }, "an event of an order that was never committed was delivered")
        var acknowledgedBefore = -1
        for (index, run) in runs.enumerated() {
            // In commit order, within each process.
            #expect(run.delivered == run.delivered.sorted() && Set(run.delivered).count == run.delivered.count,
                    "run \(index) delivered out of order: \(run.delivered.prefix(20))")
            // Never again at or before what a consumer acknowledged.
            if let first = run.delivered.first {
                #expect(first > acknowledgedBefore, "run \(index) delivered \(first) after \(acknowledgedBefore) was acknowledged")
            }
            // No gap: orders are numbered by commit, so a run resumes with the event after the
            // last logged acknowledgement, or the one after that when the kill came between
            // an acknowledgement's commit and its log line (one is in flight at a time).
            if let first = run.delivered.first {
                #expect([acknowledgedBefore + 1, acknowledgedBefore + 2].contains(first),
                        "run \(index) resumed at \(first) after \(acknowledgedBefore) was acknowledged")
            }
            acknowledgedBefore = max(acknowledgedBefore, run.acknowledged.max() ?? -1)
        }
        print("OutboxKillTests: \(cycles) kills, \(produced.count) orders acknowledged, \(runs.map(\.delivered.count).reduce(0, +)) deliveries")
    }
}

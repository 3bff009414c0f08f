// The process-kill suite: a child process runs the workload on a real directory and
// reports each acknowledged version on a pipe; the parent kills it with SIGKILL at a
// random moment, recovers the store and checks acknowledged ≤ recovered ≤ attempted, I2
// against a fault-free run of the same seed, I3, I4 and the workload's invariant.
import Strata
import StrataFileIO
import Foundation

/// Kills a child process running a workload, again and again.
public struct ProcessKillRunner: Sendable {
    public let harness: CrashHarness
    /// The program to start as the child and its arguments; the child must call
    /// `ProcessKillRunner.runChild` (as `strata crashtest --child …` does).
    public let executable: URL
    public let childArguments: @Sendable (_ directory: String, _ seed: UInt64) -> [String]
    /// Kills per seed. Each kill comes at a random moment of a run: the suite first times
    /// one run left to finish (also checked), then draws kill times within that span.
    public var kills = 20

    public init(harness: CrashHarness, executable: URL,
                childArguments: @escaping @Sendable (_ directory: String, _ seed: UInt64) -> [String]) {
        self.harness = harness
        self.executable = executable
        self.childArguments = childArguments
    }

    /// The child's side: runs the workload in `directory` on the real file system and
    /// prints `ack VERSION` for every acknowledged step, flushed at once.
    public static func runChild(_ workload: any CrashWorkload, seed: UInt64, directory: String, options: EngineOptions) {
        _ = execute(workload, seed: seed, on: POSIXFileSystem(), path: directory, options: options) { version in
            FileHandle.standardOutput.write(Data("ack \(version)\n".utf8))
        }
        FileHandle.standardOutput.write(Data("done\n".utf8))
    }

    public func run() -> SuiteResult {
        var result = SuiteResult(suite: .kill)
        let clock = ContinuousClock()
        let start = clock.now
        for seed in harness.seeds {
            let dry = SimulatedFileSystem()
            let history = History(execute(harness.workload, seed: seed, on: dry, options: harness.options).changeSets)
            result.operations = max(result.operations, dry.operationCount)
            let (span, calibration) = timedRun(seed: seed, history: history)
            record(calibration, "an unkilled run", seed: seed, run: -1, into: &result)
            let spanMicroseconds = max(UInt64(span.components.seconds) * 1_000_000
                                       + UInt64(span.components.attoseconds / 1_000_000_000_000), 1)
            // Kill k waits the k-th draw of the seed's generator, so `--op k` replays it
            // (as closely as a scheduler allows).
            var random = SplitMix64(seed: seed)
            let delays = (0..<max(kills, (harness.onlyOperation ?? 0) + 1)).map { _ in random.next() % spanMicroseconds }
            let runs = harness.onlyOperation.map { [$0] } ?? Array(0..<kills)
            for (done, run) in runs.enumerated() {
                let delay = delays[run]
                let problem = killOnce(seed: seed, delayMicroseconds: delay, history: history)
                record(problem, "kill \(run) after \(delay) µs", seed: seed, run: run, into: &result)
                harness.progress?(.kill, done + 1, runs.count)
            }
        }
        let elapsed = clock.now - start
        result.seconds = Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
        return result
    }

    private func record(_ problem: String?, _ what: String, seed: UInt64, run: Int, into result: inout SuiteResult) {
        result.statesExplored += 1
        guard let problem else { return result.passed += 1 }
        result.failures.append(CrashFailure(
            suite: .kill, detail: "\(what): \(problem)",
            replay: "strata crashtest --workload \(harness.workload.name) --mode kill --seeds \(seed) --op \(max(run, 0))"))
    }

    /// Runs the child to the end: how long it took, and the check of its store.
    private func timedRun(seed: UInt64, history: History) -> (Duration, String?) {
        let clock = ContinuousClock()
        var problem: String?
        let elapsed = clock.measure { problem = killOnce(seed: seed, delayMicroseconds: nil, history: history) }
        return (elapsed, problem)
    }

    /// Starts the child, kills it after `delayMicroseconds` (nil: lets it finish) and
    /// checks the store it left.
    private func killOnce(seed: UInt64, delayMicroseconds: UInt64?, history: History) -> String? {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("strata-kill-\(UUID().uuidString)").path
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let child = Process()
        child.executableURL = executable
        child.arguments = childArguments(directory, seed)
        var environment = ProcessInfo.processInfo.environment
        environment["SWIFT_BACKTRACE"] = "enable=no"
        child.environment = environment
        let output = Pipe()
        child.standardOutput = output
        child.standardError = FileHandle.nullDevice
        do { try child.run() } catch { return "the child did not start: \(error)" }
        if let delayMicroseconds {
            usleep(UInt32(min(delayMicroseconds, UInt64(UInt32.max))))
            kill(child.processIdentifier, SIGKILL)
        }
        // Read to the end (the child's exit closes the pipe) before waiting, so a child
        // with much to say never stalls on a full pipe.
        let said = output.fileHandleForReading.readDataToEndOfFile()
        child.waitUntilExit()
        let lines = String(decoding: said, as: UTF8.self).split(separator: "\n")
        let acknowledged = lines.compactMap { $0.hasPrefix("ack ") ? UInt64($0.dropFirst(4)) : nil }.max() ?? 0
        return checkRecovery(harness.workload, fileSystem: POSIXFileSystem(), path: directory, options: harness.options,
                             acknowledged: acknowledged, history: history)
    }
}

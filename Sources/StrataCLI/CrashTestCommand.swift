// `strata crashtest`: runs the crash harness (StrataTesting) on a built-in workload and
// prints a summary table per suite; the last line is `N passed, M failed` and the exit
// status is non-zero when anything failed.
import ArgumentParser
import Foundation
import StrataTesting

struct CrashTestCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "crashtest",
        abstract: "Crash Strata under the whole fault model and check what it recovers.")

    @Option(help: "The workload: w1 (200 commits with checkpoints), kv (units with nested units), bank, bank-concurrent (8 threads), or outbox (orders and their events).")
    var workload = "w1"

    @Option(help: "Suites: sim, recovery, torn, errors, bitflip, kill or all.")
    var mode = "all"

    @Option(help: "Comma-separated seeds; each is a separate run.")
    var seeds = "1"

    @Option(help: "At most this many operations (or byte offsets for bitflip) per suite and seed, spread evenly (default: all).")
    var ops: Int?

    @Option(help: "Replay one case: the operation (or offset, or kill number) a failure names.")
    var op: Int?

    @Option(help: "Steps of the workload (default: the workload's own).")
    var steps: Int?

    @Option(help: "Kills per seed for the kill suite.")
    var kills = 20

    @Flag(help: "One JSON object per suite and per failure instead of the table.")
    var json = false

    @Flag(help: .hidden)
    var child = false

    @Option(help: .hidden)
    var directory: String?

    func run() throws {
        guard let chosen = builtInWorkload(named: workload, steps: steps) else {
            throw ValidationError("unknown workload \(workload); use w1, kv, bank, bank-concurrent or outbox")
        }
        let parsedSeeds = seeds.split(separator: ",").compactMap { UInt64($0.trimmingCharacters(in: .whitespaces)) }
        guard !parsedSeeds.isEmpty else { throw ValidationError("--seeds takes numbers separated by commas") }
        var harness = CrashHarness(workload: chosen)
        if child {
            guard let directory else { throw ValidationError("--child needs --directory") }
            ProcessKillRunner.runChild(chosen, seed: parsedSeeds[0], directory: directory, options: harness.options)
            return
        }
        let suites: [CrashMode] = mode == "all" ? CrashMode.allCases : [try suite(mode)]
        harness.seeds = parsedSeeds
        harness.sampleLimit = ops
        harness.onlyOperation = op
        let reporters = ProgressBoard()
        harness.progress = { suite, done, total in reporters.update(suite, done, total) }
        var results: [SuiteResult] = []
        for suite in suites {
            if suite == .kill {
                var runner = ProcessKillRunner(harness: harness, executable: Self.ownExecutable) { [workload, steps] directory, seed in
                    ["crashtest", "--child", "--workload", workload, "--seeds", "\(seed)", "--directory", directory]
                        + (steps.map { ["--steps", "\($0)"] } ?? [])
                }
                runner.kills = kills
                results.append(runner.run())
            } else {
                results.append(harness.run(suite))
            }
        }
        try report(results)
        let passed = results.reduce(0) { $0 + $1.passed }
        let failed = results.reduce(0) { $0 + $1.failures.count }
        print("\(passed) passed, \(failed) failed")
        if failed > 0 { throw ExitCode.failure }
    }

    private func suite(_ name: String) throws -> CrashMode {
        guard let suite = CrashMode(rawValue: name) else {
            throw ValidationError("unknown mode \(name); use sim, recovery, torn, errors, bitflip, kill or all")
        }
        return suite
    }

    /// One suite's line of `--json`.
    private struct SuiteLine: Encodable {
        let suite: String
        let workload: String
        let operations: Int
        let states: Int
        let passed: Int
        let failed: Int
        let seconds: Double
    }

    /// One failure's line of `--json`.
    private struct FailureLine: Encodable {
        let failure: String
        let detail: String
        let replay: String
    }

    private func report(_ results: [SuiteResult]) throws {
        if json {
            for result in results {
                print(try jsonLine(SuiteLine(suite: result.suite.rawValue, workload: workload, operations: result.operations,
                                             states: result.statesExplored, passed: result.passed,
                                             failed: result.failures.count, seconds: (result.seconds * 100).rounded() / 100)))
                for failure in result.failures {
                    print(try jsonLine(FailureLine(failure: failure.suite.rawValue, detail: failure.detail, replay: failure.replay)))
                }
            }
            return
        }
        for failure in results.flatMap(\.failures).prefix(20) { print("FAILED \(failure)") }
        print("| suite    | workload        | K (ops) | states | passed | failed | seconds |")
        print("|----------|-----------------|--------:|-------:|-------:|-------:|--------:|")
        for result in results {
            print("| " + result.suite.rawValue.padding(toLength: 8, withPad: " ", startingAt: 0)
                  + " | " + workload.padding(toLength: 15, withPad: " ", startingAt: 0)
                  + String(format: " | %7d | %6d | %6d | %6d | %7.1f |", result.operations, result.statesExplored,
                           result.passed, result.failures.count, result.seconds))
        }
    }

    /// This program's own path, to start it again as the child of the kill suite.
    static var ownExecutable: URL {
        let link = (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")) ?? CommandLine.arguments[0]
        return URL(fileURLWithPath: link)
    }
}

/// One progress reporter per suite, shared with the harness's callback.
final class ProgressBoard: @unchecked Sendable {
    // Only the thread running the harness calls `update`; the lock keeps that honest.
    private let lock = NSLock()
    private var reporters: [CrashMode: ProgressReporter] = [:]

    func update(_ suite: CrashMode, _ done: Int, _ total: Int) {
        lock.lock()
        defer { lock.unlock() }
        var reporter = reporters[suite] ?? ProgressReporter(label: suite.rawValue, total: total)
        reporter.update(done)
        reporters[suite] = reporter
    }
}

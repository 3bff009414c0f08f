// The crash harness: runs a workload under every fault of the fault model
// (SimulatedFileSystem.swift) and checks each recovered store (WorkloadExecution.swift).
// Suites: `sim` crashes at every I/O operation under several power-loss fates and a
// process kill; `recovery` crashes again at every operation of the recovery from a sample
// of those crashes (one in ten by default); `torn` crashes at every operation tearing every unsynced write at 512 B,
// 4 KiB and byte granularity; `errors` injects each errno, a short write, a lost sync
// (fsyncgate) and a corrupted read at every operation, once and persistently, then
// crashes; `bitflip` flips a bit in bytes of every file of a finished store. Every
// failure comes with the command that replays it.
import Strata
import StrataFileIO
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// The harness's suites.
public enum CrashMode: String, CaseIterable, Sendable {
    case sim, recovery, torn, errors, bitflip, kill
}

/// One crash state that broke a promise.
public struct CrashFailure: Sendable, CustomStringConvertible {
    public let suite: CrashMode
    /// What was done and what went wrong.
    public let detail: String
    /// A command that replays exactly this case.
    public let replay: String

    public var description: String { "\(suite.rawValue): \(detail)\n  replay: \(replay)" }
}

/// What one suite did.
public struct SuiteResult: Sendable {
    public let suite: CrashMode
    /// I/O operations of the fault-free run (K): where crashes and faults were placed.
    public var operations = 0
    /// Crash states (or faulted runs, or damaged files) checked, and how many passed.
    public var statesExplored = 0
    public var passed = 0
    public var failures: [CrashFailure] = []
    public var seconds = 0.0
}

/// Runs the suites for one workload.
public struct CrashHarness: Sendable {
    public let workload: any CrashWorkload
    /// Seeds for the workload's randomness and the crash fates; each is a separate run.
    public var seeds: [UInt64] = [1]
    /// At most this many operations (or byte offsets, for `bitflip`) per suite and seed,
    /// spread evenly; nil: all of them.
    public var sampleLimit: Int?
    /// Replays just this operation (or byte offset).
    public var onlyOperation: Int?
    /// Store settings; log segments are capped at 16 KiB so rotations happen.
    public var options: EngineOptions
    /// Called as work proceeds: suite, done, total.
    public var progress: (@Sendable (CrashMode, Int, Int) -> Void)?

    public init(workload: any CrashWorkload, options: EngineOptions = EngineOptions()) {
        self.workload = workload
        var options = options
        options.log.segmentBytes = min(options.log.segmentBytes, 16 << 10)
        self.options = options
    }

    /// Runs one suite (not `kill`: see `ProcessKillRunner`).
    public func run(_ suite: CrashMode) -> SuiteResult {
        let clock = ContinuousClock()
        var result = SuiteResult(suite: suite)
        let elapsed = clock.measure {
            for seed in seeds {
                switch suite {
                case .sim, .torn: crashAtEveryOperation(seed: seed, torn: suite == .torn, into: &result)
                case .recovery: crashDuringRecovery(seed: seed, into: &result)
                case .errors: injectErrors(seed: seed, into: &result)
                case .bitflip: flipBits(seed: seed, into: &result)
                case .kill: break
                }
            }
        }
        result.seconds = Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
        return result
    }

    /// The command that replays one case.
    func replay(_ suite: CrashMode, seed: UInt64, operation: Int) -> String {
        "strata crashtest --workload \(workload.name) --mode \(suite.rawValue) --seeds \(seed) --op \(operation)"
    }

    /// The indices to try out of `count`.
    func sample(_ count: Int) -> [Int] {
        if let onlyOperation { return onlyOperation < count ? [onlyOperation] : [] }
        guard let limit = sampleLimit, limit < count else { return Array(0..<count) }
        guard limit > 0 else { return [] }
        return (0..<limit).map { $0 * count / limit }
    }

    private func dryRun(seed: UInt64) -> (History, operations: Int, fileSystem: SimulatedFileSystem) {
        let fileSystem = SimulatedFileSystem()
        let execution = execute(workload, seed: seed, on: fileSystem, options: options)
        return (History(execution.changeSets), fileSystem.operationCount, fileSystem)
    }

    private func record(_ problem: String?, _ suite: CrashMode, seed: UInt64, operation: Int, what: String,
                        into result: inout SuiteResult) {
        result.statesExplored += 1
        guard let problem else { return result.passed += 1 }
        result.failures.append(CrashFailure(suite: suite, detail: "\(what): \(problem)",
                                            replay: replay(suite, seed: seed, operation: operation)))
    }

    private func crashAtEveryOperation(seed: UInt64, torn: Bool, into result: inout SuiteResult) {
        let suite: CrashMode = torn ? .torn : .sim
        let (history, operations, _) = dryRun(seed: seed)
        result.operations = max(result.operations, operations)
        let cuts = sample(operations)
        for (done, cut) in cuts.enumerated() {
            let fileSystem = SimulatedFileSystem()
            fileSystem.cutPower(atOperation: cut)
            let execution = execute(workload, seed: seed, on: fileSystem, options: options)
            // Eight fates per crash point: six seeded power losses (two with 4 KiB sectors),
            // one that keeps only synced data, and a process kill; or three tearings.
            let base = seed &* 1_000_003 &+ UInt64(cut) &* 8
            let fates: [(String, SimulatedFileSystem.CrashFates, Int)] = torn
                ? [("torn 512 B sectors", .tornWrites(seed: base), 512),
                   ("torn 4 KiB sectors", .tornWrites(seed: base &+ 1), 4096),
                   ("torn bytes", .tornWrites(seed: base &+ 2), 1)]
                : (0..<6).map { ("power loss (fate \(base &+ $0))", .random(seed: base &+ $0), $0 < 4 ? 512 : 4096) }
                    + [("power loss, only synced data", .dropAll, 512), ("process kill", .keepAll, 512)]
            for (name, fate, sectorBytes) in fates {
                let crashed = fileSystem.clone()
                crashed.setSectorBytes(sectorBytes)
                crashed.crash(fate)
                let problem = checkRecovery(workload, fileSystem: crashed, options: options,
                                            acknowledged: execution.acknowledged, history: history)
                record(problem, suite, seed: seed, operation: cut, what: "\(name) at operation \(cut) of \(operations)",
                       into: &result)
            }
            progress?(suite, done + 1, cuts.count)
        }
    }

    /// Fault-model item 7: recovery must be idempotent. For a sample of crash states (one
    /// in ten unless `sampleLimit` says otherwise), crash again at every operation of the
    /// recovery, then recover for real and check as usual.
    private func crashDuringRecovery(seed: UInt64, into result: inout SuiteResult) {
        let (history, operations, _) = dryRun(seed: seed)
        result.operations = max(result.operations, operations)
        var sampler = self
        if sampler.sampleLimit == nil { sampler.sampleLimit = max(operations / 10, 1) }
        let cuts = sampler.sample(operations)
        for (done, cut) in cuts.enumerated() {
            let fileSystem = SimulatedFileSystem()
            fileSystem.cutPower(atOperation: cut)
            let execution = execute(workload, seed: seed, on: fileSystem, options: options)
            let crashed = fileSystem.clone()
            crashed.crash(.random(seed: seed &+ UInt64(cut)))
            // How many operations one recovery of this state performs.
            let probe = crashed.clone()
            let start = probe.operationCount
            _ = try? Store.open(path: harnessStorePath, fileSystem: probe, options: options)
            let recoveryOperations = probe.operationCount - start
            for step in 0..<recoveryOperations {
                let again = crashed.clone()
                again.cutPower(atOperation: again.operationCount + step)
                _ = try? Store.open(path: harnessStorePath, fileSystem: again, options: options)
                again.crash(.random(seed: seed &* 17 &+ UInt64(step)))
                let problem = checkRecovery(workload, fileSystem: again, options: options,
                                            acknowledged: execution.acknowledged, history: history)
                record(problem, .recovery, seed: seed, operation: cut,
                       what: "crash at operation \(step) of recovering from a crash at operation \(cut)", into: &result)
            }
            progress?(.recovery, done + 1, cuts.count)
        }
    }

    /// The faults of fault-model item 6, each once and persistently.
    static let injectedFaults: [(String, SimulatedFileSystem.InjectedFault)] = [
        ("EIO", .errno(EIO)), ("ENOSPC", .errno(ENOSPC)), ("EDQUOT", .errno(EDQUOT)), ("EROFS", .errno(EROFS)),
        ("EINTR", .errno(EINTR)), ("short write", .shortWrite), ("lost fdatasync", .lostSync),
        ("corrupted read", .corruptRead),
    ]

    private func injectErrors(seed: UInt64, into result: inout SuiteResult) {
        let (history, operations, _) = dryRun(seed: seed)
        result.operations = max(result.operations, operations)
        let points = sample(operations)
        for (done, operation) in points.enumerated() {
            for (name, fault) in Self.injectedFaults {
                for persistent in [false, true] {
                    let fileSystem = SimulatedFileSystem()
                    fileSystem.injectFault(fault, atOperation: operation, persistent: persistent)
                    let execution = execute(workload, seed: seed, on: fileSystem, options: options)
                    // The run either finished or stopped cleanly; then the power goes.
                    fileSystem.crash(.random(seed: seed &+ UInt64(operation)))
                    let problem = checkRecovery(workload, fileSystem: fileSystem, options: options,
                                                acknowledged: execution.acknowledged, history: history)
                    record(problem, .errors, seed: seed, operation: operation,
                           what: "\(name) \(persistent ? "from" : "at") operation \(operation) of \(operations)", into: &result)
                }
            }
            // A lost fdatasync, then the process ends and the store is reopened in the same
            // boot (the page cache still holds the unsynced frame), takes a commit, and the
            // power goes: the reopen must not have built on a frame only the cache held.
            let fileSystem = SimulatedFileSystem()
            fileSystem.injectFault(.lostSync, atOperation: operation)
            let execution = execute(workload, seed: seed, on: fileSystem, options: options)
            fileSystem.crash(.keepAll)
            let problem = checkReopenInTheSameBoot(fileSystem, acknowledged: execution.acknowledged, history: history,
                                                   seed: seed &+ UInt64(operation))
            record(problem, .errors, seed: seed, operation: operation,
                   what: "lost fdatasync at operation \(operation) of \(operations), a reopen in the same boot, a commit, "
                       + "a power loss", into: &result)
            progress?(.errors, done + 1, points.count)
        }
    }

    /// Opens the store a killed process left (its writes still only in the page cache),
    /// commits one key, cuts the power, and checks the store then recovers that commit on
    /// top of a state the run committed, with I1 for the run's acknowledged commits.
    private func checkReopenInTheSameBoot(_ fileSystem: SimulatedFileSystem, acknowledged: UInt64, history: History,
                                          seed: UInt64) -> String? {
        let marker = Array("harness/same-boot".utf8)
        let reopened: Store
        do {
            reopened = try Store.open(path: harnessStorePath, fileSystem: fileSystem, options: options)
            try reopened.write { try $0.put(marker, Array("\(reopened.version)".utf8)) }
        } catch {
            return "reopening in the same boot: \(error)"
        }
        let version = reopened.version - 1
        // No close: the power goes with the commit only in the log.
        fileSystem.crash(.random(seed: seed))
        withExtendedLifetime(reopened) {}
        do {
            let store = try Store.open(path: harnessStorePath, fileSystem: fileSystem, options: options)
            defer { try? store.close() }
            guard store.version == version + 1, try store.makeContext().get(marker) == Array("\(version)".utf8) else {
                return "I1: the commit acknowledged after reopening in the same boot is missing (recovered version "
                    + "\(store.version), it was \(version + 1))"
            }
            guard version >= acknowledged else { return "I1: version \(acknowledged) was acknowledged, \(version) reopened" }
            if workload.isDeterministic {
                var recovered = try contents(of: store)
                recovered[marker] = nil
                guard recovered == history.states[version] else {
                    return "I2: under the commit after the reopen, the state differs from version \(version)'s"
                }
            }
            let verification = store.verify()
            return verification.isValid ? nil : "I3: \(verification.problems[0])"
        } catch {
            return "recovery after a reopen in the same boot and a power loss: \(error)"
        }
    }

    private func flipBits(seed: UInt64, into result: inout SuiteResult) {
        let (history, _, fileSystem) = dryRun(seed: seed)
        // Every file of the store, in a fixed order, as one run of byte offsets.
        let files = storeFiles(fileSystem)
        let total = files.reduce(0) { $0 + $1.byteCount }
        result.operations = max(result.operations, total)
        let offsets = sample(total)
        for (done, offset) in offsets.enumerated() {
            var local = offset
            guard let file = files.first(where: { file in
                if local < file.byteCount { return true }
                local -= file.byteCount
                return false
            }) else { continue }
            let damaged = fileSystem.clone()
            damaged.modify(file.path) { $0[local] ^= UInt8(1 << (local % 8)) }
            let problem = checkDetection(damaged, damagedFile: file.path, history: history)
            record(problem, .bitflip, seed: seed, operation: offset,
                   what: "bit \(local % 8) of byte \(local) of \(file.path)", into: &result)
            progress?(.bitflip, done + 1, offsets.count)
        }
    }

    private func storeFiles(_ fileSystem: SimulatedFileSystem) -> [(path: String, byteCount: Int)] {
        var paths = [harnessStorePath + "/data"]
        let logDirectory = harnessStorePath + "/wal"
        let segments = ((try? fileSystem.contentsOfDirectory(logDirectory)) ?? []).filter { $0.hasSuffix(".seg") }
        paths += segments.map { logDirectory + "/" + $0 }
        return paths.compactMap { path in fileSystem.contents(of: path).map { (path, $0.count) } }
    }

    /// I5: a damaged byte is either harmless (the state is the last one, or the one before
    /// when the damage cut off the final log frame as a torn tail) or reported by an error
    /// that names the damaged file; never wrong data.
    private func checkDetection(_ fileSystem: SimulatedFileSystem, damagedFile: String, history: History) -> String? {
        let name = String(damagedFile.split(separator: "/").last ?? "")
        func named(_ error: any Error) -> String? {
            "\(error)".contains(name) ? nil : "I5: the damage was reported without naming \(name): \(error)"
        }
        let store: Store
        do {
            store = try Store.open(path: harnessStorePath, fileSystem: fileSystem, options: options)
        } catch {
            return named(error)
        }
        defer { try? store.close() }
        do {
            let recovered = try contents(of: store)
            let version = store.version
            guard version + 1 >= history.lastVersion, let expected = history.states[version] else {
                return "I5: the damage silently lost commits (recovered version \(version) of \(history.lastVersion))"
            }
            guard recovered == expected else { return "I5: the damage changed what reads return at version \(version)" }
            return nil
        } catch {
            return named(error)
        }
    }
}

// Running a workload on a simulated file system and checking a recovered store against
// what the fault-free run committed (I1–I4 of docs/Durability.md, plus the workload's invariant).
import Strata
import StrataFileIO
import StrataLocks

/// The store directory the harness uses on its simulated file systems.
let harnessStorePath = "/store"

/// What one run of a workload committed.
struct Execution {
    /// The highest version whose commit returned (published means acknowledged).
    var acknowledged: UInt64 = 0
    /// Every committed change set, in version order.
    var changeSets: [ChangeSet] = []
    /// Whether every step ran.
    var completed = false
}

/// Runs `workload` with `seed` on `fileSystem` until it finishes or a fault stops it. The
/// store is left open, as a crash would leave it.
func execute(_ workload: any CrashWorkload, seed: UInt64, on fileSystem: any FileSystem, path: String = harnessStorePath,
             options: EngineOptions, onAcknowledged: (@Sendable (UInt64) -> Void)? = nil) -> Execution {
    let committed = Locked<[ChangeSet]>([])
    guard let store = try? Store.open(path: path, fileSystem: fileSystem, options: options) else { return Execution() }
    let observation = store.observeCommits { changeSet in committed.withLock { $0.append(changeSet) } }
    defer { store.removeObserver(observation) }
    var completed = false
    var random = SplitMix64(seed: seed)
    do {
        try workload.setUp(store)
        onAcknowledged?(store.version)
        for step in 0..<workload.stepCount {
            try workload.run(step: step, on: store, random: &random)
            onAcknowledged?(store.version)
            if workload.checkpointInterval > 0, (step + 1) % workload.checkpointInterval == 0 {
                try store.checkpoint()
            }
        }
        completed = true
    } catch {
        // A fault stopped the run; what was acknowledged so far is what must survive.
    }
    let changeSets = committed.withLock { $0 }
    return Execution(acknowledged: changeSets.last?.version ?? 0, changeSets: changeSets, completed: completed)
}

/// Every state the store may legally recover to: the state after each committed version.
struct History {
    private(set) var states: [UInt64: [[UInt8]: [UInt8]]] = [0: [:]]
    private(set) var lastVersion: UInt64 = 0

    init(_ changeSets: [ChangeSet]) {
        var state: [[UInt8]: [UInt8]] = [:]
        for changeSet in changeSets {
            for change in changeSet.changes { state[change.key] = change.value }
            states[changeSet.version] = state
            lastVersion = changeSet.version
        }
    }
}

/// Reads every key of `store`.
func contents(of store: Store) throws -> [[UInt8]: [UInt8]] {
    Dictionary(uniqueKeysWithValues: try store.makeContext().scan().map { ($0.key, $0.value) })
}

/// Checks a store recovered on `fileSystem` after a run that acknowledged `acknowledged`.
/// Returns what is wrong, or nil when I1–I4 and the workload's invariant hold.
func checkRecovery(_ workload: any CrashWorkload, fileSystem: any FileSystem, path: String = harnessStorePath,
                   options: EngineOptions, acknowledged: UInt64, history: History) -> String? {
    let store: Store
    do {
        store = try Store.open(path: path, fileSystem: fileSystem, options: options)
    } catch {
        return "recovery failed: \(error)"
    }
    do {
        let version = store.version
        // I1: every acknowledged commit is there.
        guard version >= acknowledged else {
            return "I1: recovered version \(version), but version \(acknowledged) was acknowledged"
        }
        // I2: the state is that after a prefix of the commits (when the workload's
        // commit order is deterministic; the invariant covers the others).
        if workload.isDeterministic {
            guard let expected = history.states[version] else {
                return "I2: recovered version \(version), but the run committed only up to \(history.lastVersion)"
            }
            let recovered = try contents(of: store)
            guard recovered == expected else {
                return "I2: the state at version \(version) differs from what was committed (\(recovered.count) keys, expected \(expected.count))"
            }
        }
        // I3: every reachable page verifies.
        let verification = store.verify()
        guard verification.isValid else { return "I3: \(verification.problems[0])" }
        do {
            try workload.checkInvariant(store)
        } catch {
            return "invariant: \(error)"
        }
        // I4: it takes a commit and reopens with it.
        try store.write { try $0.put(Array("harness/after".utf8), Array("\(version)".utf8)) }
        try store.close()
        let reopened = try Store.open(path: path, fileSystem: fileSystem, options: options)
        defer { try? reopened.close() }
        guard try reopened.makeContext().get(Array("harness/after".utf8)) == Array("\(version)".utf8) else {
            return "I4: a commit after recovery did not survive a clean reopen"
        }
        return nil
    } catch {
        return "after recovery: \(error)"
    }
}

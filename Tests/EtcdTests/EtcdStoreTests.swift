// What only a store over etcd has: several stores (several application servers) sharing
// one prefix, etcd's limits, unreachable endpoints, and commits whose outcome is unknown.
import Foundation
import Strata
import StrataEtcd
import StrataTesting
import Synchronization
import TestBackends
import Testing

/// Waits until `condition` holds (a watch's delay), for up to 30 seconds: a loaded
/// machine's fsyncs can take seconds.
func eventually(_ condition: () throws -> Bool) async throws -> Bool {
    for _ in 0..<3_000 {
        if try condition() { return true }
        try await Task.sleep(for: .milliseconds(10))
    }
    return try condition()
}

@Suite(.hangLimit) struct EtcdStoreTests {

    @Test func storesOnOnePrefixSeeEachOthersCommitsAndConflict() async throws {
        let prefix = "shared-\(UUID().uuidString)/"
        let first = try await EtcdServer.makeStore(prefix: prefix)
        defer { try? first.close() }
        try await first.write { unit in try unit.put(bytes("k"), bytes("1")) }
        // A store opened later loads what is there.
        let second = try await EtcdServer.makeStore(prefix: prefix)
        defer { try? second.close() }
        #expect(try await second.read { try $0.get(bytes("k")) } == bytes("1"))
        // And each sees the other's later commits through the watch, in its change feed too.
        let feed = try first.changes()
        try await second.write { unit in try unit.put(bytes("k"), bytes("2")) }
        #expect(try await eventually { try first.read { try $0.get(bytes("k")) } == bytes("2") })
        for try await changeSet in feed {
            #expect(changeSet.changes == [Change(key: bytes("k"), value: bytes("2"))])
            break
        }
        // Two contexts in two stores read the same version and write the same key: the
        // second to commit conflicts, naming it.
        let a = first.makeContext(), b = second.makeContext()
        try a.put(bytes("k"), bytes(String(decoding: try a.get(bytes("k"))!, as: UTF8.self) + "a"))
        try b.put(bytes("k"), bytes(String(decoding: try b.get(bytes("k"))!, as: UTF8.self) + "b"))
        try await a.commit()
        await #expect { try await b.commit() } throws: { error in
            guard case let ContextError.conflict(keys, _) = error else { return false }
            return keys == [bytes("k")]
        }
        b.discard()
        // The conflict is thrown once the loser's replica shows the commit that beat it, so
        // a retry on a fresh context reads it instead of conflicting again.
        #expect(try await second.read { try $0.get(bytes("k")) } == bytes("2a"))
        // A store under another prefix sees none of it.
        let other = try await EtcdServer.makeStore()
        defer { try? other.close() }
        #expect(try await other.read { try $0.scan() }.isEmpty)
    }

    @Test func aCommitThatChangesNothingReturnsAtOnceWhileOtherPrefixesMoveOn() async throws {
        // A long request timeout: a blocking commit gives up waiting for the replica only
        // after it, so a commit that waited for a revision that never comes takes two
        // minutes (an async one waits until the suite's time limit).
        var options = EtcdServer.options
        options.requestTimeout = .seconds(120)
        let store = try await Store.open(etcd: [EtcdServer.shared.get().endpoint], prefix: "unchanged-\(UUID().uuidString)/",
                                         options: options)
        let other = try await EtcdServer.makeStore()
        defer {
            try? store.close()
            try? other.close()
        }
        try await store.write { unit in try unit.put(bytes("k"), bytes("1")) }
        // The server's revision moves past the last one under this store's prefix.
        try await other.write { unit in try unit.put(bytes("x"), bytes("1")) }
        let before = store.version
        let clock = ContinuousClock()
        let start = clock.now
        // Deletes of absent keys make no revision in etcd: nothing to wait for, either way.
        try await store.write { unit in try unit.delete(bytes("absent")) }
        try Self.deleteBlocking(store, bytes("absent too"))
        // Two round trips; 60 s leaves room for a loaded machine: in a run of the whole
        // suite on two cores they once took 30.6 s (alone, the test took 1.7 s).
        #expect(clock.now - start < .seconds(60), "a commit that changed nothing waited for a revision")
        #expect(store.version == before)
        // A delete that removes a key makes a revision, and the commit waits for it.
        try await store.write { unit in try unit.delete(bytes("k")) }
        #expect(try await store.read { try $0.get(bytes("k")) } == nil)
        #expect(store.version == before + 1)
    }

    @Test func aCommitBeyondEtcdsLimitsIsRefusedNamingTheServerFlag() async throws {
        let store = try await EtcdServer.makeStore()
        defer { try? store.close() }
        do {
            try await store.write { unit in
                for index in 0...EtcdServer.maxTxnOps { try unit.put(bytes("key\(index)"), bytes("v")) }
            }
            Issue.record("a commit of more keys than --max-txn-ops was accepted")
        } catch let UnitOfWorkError.commitFailed(.notWritten(error)) {
            #expect("\(error)".contains("--max-txn-ops"), "\(error)")
        }
        #expect(try await store.read { try $0.scan() }.isEmpty, "nothing of the refused commit was written")
        var options = EtcdServer.options
        options.maxRequestBytes = 4_096
        let small = try await Store.open(etcd: [EtcdServer.shared.get().endpoint], prefix: "small-\(UUID().uuidString)/",
                                         options: options)
        defer { try? small.close() }
        do {
            try await small.write { unit in try unit.put(bytes("big"), [UInt8](repeating: 7, count: 10_000)) }
            Issue.record("a request larger than --max-request-bytes was accepted")
        } catch let UnitOfWorkError.commitFailed(.notWritten(error)) {
            #expect("\(error)".contains("--max-request-bytes"), "\(error)")
        }
    }

    @Test func anEtcdMemberAProcessStartedHasExitedAndIsRemovedOnceTheProcessHas() async throws {
        let file = NSTemporaryDirectory() + "strata-etcd-started-\(UUID().uuidString)"
        defer { try? FileManager.default.removeItem(atPath: file) }
        let process = Process()
        process.executableURL = BankProcesses.executable
        process.arguments = ["--start-etcd-and-exit", file]
        process.standardInput = FileHandle.nullDevice
        process.standardOutput = FileHandle.nullDevice
        process.standardError = FileHandle.nullDevice
        try process.run()
        while process.isRunning { try await Task.sleep(for: .milliseconds(10)) }
        #expect(process.terminationStatus == 0)
        let started = try String(contentsOfFile: file, encoding: .utf8).split(separator: " ", maxSplits: 1)
        let pid = try #require(started.first.flatMap { Int32($0) })
        let directory = String(try #require(started.last))
        // Gone, not a zombie, and its ports and directory free, the moment the process ended.
        #expect(!FileManager.default.fileExists(atPath: "/proc/\(pid)"), "etcd \(pid) outlived the process that started it")
        #expect(!FileManager.default.fileExists(atPath: directory))
    }

    @Test func wrongConfigurationAndUnreachableServersAreClearErrors() async throws {
        await #expect { try await Store.open(etcd: [EtcdServer.shared.get().endpoint], prefix: "") } throws: { error in
            "\(error)".contains("prefix is empty")
        }
        await #expect { try await Store.open(etcd: ["ftp://127.0.0.1:2379"], prefix: "p/") } throws: { error in
            "\(error)".contains("not an http:// or https:// URL")
        }
        // A port nobody listens on, then the real server: the open fails over to it.
        let closed = "http://127.0.0.1:1"
        await #expect { try await Store.open(etcd: [closed], prefix: "p/") } throws: { error in
            guard case EtcdError.unreachable = error else { return false }
            return true
        }
        let store = try await Store.open(etcd: [closed, EtcdServer.shared.get().endpoint], prefix: "failover-\(UUID().uuidString)/",
                                         options: EtcdServer.options)
        try await store.write { unit in try unit.put(bytes("k"), bytes("v")) }
        #expect(try await store.read { try $0.get(bytes("k")) } == bytes("v"))
        try store.close()
        #expect { try store.makeContext().commitPut() } throws: { error in
            guard case EngineError.closed = error else { return false }
            return true
        }
    }

    /// A server that stops answering after the transaction was sent: the commit is reported
    /// as of unknown outcome, never as failed or done (the server may still apply it, or
    /// drop it with the closed connection); once the server answers again, a read tells,
    /// and a store opened afresh reads the same.
    @Test func aCommitToAServerThatStopsAnsweringHasAnUnknownOutcome() async throws {
        let server = try EtcdServer.start()
        defer { server.stop() }
        var paused = EtcdServer.options
        // Short enough to wait out while the server is paused; only the commit sent to the
        // paused server uses it, so a loaded machine cannot make the other calls time out.
        paused.requestTimeout = .seconds(3)
        let setup = try await Store.open(etcd: [server.endpoint], prefix: "hang/", options: EtcdServer.options)
        try await setup.write { unit in try unit.put(bytes("k"), bytes("before")) }
        try setup.close()
        let store = try await Store.open(etcd: [server.endpoint], prefix: "hang/", options: paused)
        defer { try? store.close() }
        #expect(try await store.read { try $0.get(bytes("k")) } == bytes("before"))
        server.pause()
        do {
            try await store.write { unit in try unit.put(bytes("k"), bytes("after")) }
            Issue.record("a commit to a stopped server succeeded")
        } catch let UnitOfWorkError.commitFailed(failure) {
            guard case .outcomeUnknown = failure else {
                Issue.record("expected an unknown outcome, got \(failure)")
                server.resume()
                return
            }
        }
        server.resume()
        // Rewriting k makes this commit conflict (and run again) if k changed after its
        // snapshot, so "next" holds k's value as of this commit; the unknown transaction,
        // should it arrive later, then finds k changed and writes nothing.
        let later = try await Store.open(etcd: [server.endpoint], prefix: "hang/", options: EtcdServer.options)
        defer { try? later.close() }
        try await later.write(retries: 10) { unit in
            let value = try unit.get(bytes("k")) ?? []
            try unit.put(bytes("k"), value)
            try unit.put(bytes("next"), value)
        }
        let seen = try await later.read { try $0.get(bytes("k")) }
        #expect(seen == bytes("before") || seen == bytes("after"))
        let fresh = try await Store.open(etcd: [server.endpoint], prefix: "hang/", options: EtcdServer.options)
        defer { try? fresh.close() }
        #expect(try await fresh.read { try $0.get(bytes("k")) } == seen)
        #expect(try await fresh.read { try $0.get(bytes("next")) } == seen)
    }

    /// A member stopped gracefully (SIGTERM, as an operator's restart does) while commits
    /// are in flight applies them, then answers "transport is closing": those commits are
    /// unknown outcomes, never "not written", or a caller that tried one again would apply
    /// it twice. 32 writers commit a key each at a time until the member stops; once it
    /// runs again, every commit that failed as not written is absent and every acknowledged
    /// one present. Rounds go on until some failed commit is found applied (with 32
    /// writers, one of the first three rounds did in each of six runs), at most 30, and
    /// inside the whole suite none starts after four minutes (below).
    @Test func commitsCutByAGracefulStopAreUnknownNeverUnwritten() async throws {
        let cluster = try EtcdCluster(EtcdCluster.Configuration(members: 1))
        defer { cluster.shutdown() }
        var options = EtcdOptions()
        options.requestTimeout = .seconds(5)
        var appliedButFailed: [String] = [], rounds = 0
        // Alone (as .ci/run runs it, with STRATA_TIMING_CHECKS=1) a stop catches such a
        // commit within one to three rounds, and one of 30 must. Inside the whole suite on
        // two cores a round took more than two minutes: there no round starts after four
        // minutes, and only 30 rounds run out without a catch fail the test.
        let mustCatch = ProcessInfo.processInfo.environment["STRATA_TIMING_CHECKS"] == "1"
        let start = ContinuousClock.now
        while appliedButFailed.isEmpty && rounds < 30 {
            if !mustCatch && rounds > 0 && ContinuousClock.now - start > .seconds(240) { break }
            rounds += 1
            let round = rounds
            let store = try await Store.open(etcd: cluster.endpoints, prefix: "stop/", options: options)
            defer { try? store.close() }
            let progress = WriterProgress()
            let (outcomes, restarted) = await withTaskGroup(of: [(key: String, outcome: String)].self) { group in
                for writer in 0..<32 {
                    group.addTask {
                        var outcomes: [(key: String, outcome: String)] = []
                        var n = 0
                        while !progress.stopping.load(ordering: .relaxed) {
                            n += 1
                            let key = "\(round)/\(writer)/\(n)"
                            do {
                                try await store.write { unit in try unit.put(bytes(key), bytes("v")) }
                                outcomes.append((key, "acknowledged"))
                                progress.acknowledged.add(1, ordering: .relaxed)
                            } catch UnitOfWorkError.commitFailed(.notWritten) {
                                outcomes.append((key, "not written"))
                                break
                            } catch UnitOfWorkError.commitFailed(.outcomeUnknown) {
                                outcomes.append((key, "unknown"))
                                break
                            } catch {
                                outcomes.append((key, "failed: \(error)"))
                                break
                            }
                        }
                        return outcomes
                    }
                }
                let deadline = ContinuousClock.now + .seconds(60)
                while progress.acknowledged.load(ordering: .relaxed) < 40, ContinuousClock.now < deadline {
                    try? await Task.sleep(for: .milliseconds(10))
                }
                // Off the cooperative pool: both wait for the member's process. The writers
                // stop only once the member has, so commits go on being sent while it stops.
                let restarted: Result<Void, any Error> = await withCheckedContinuation { continuation in
                    DispatchQueue.global().async {
                        cluster.stop(0)
                        progress.stopping.store(true, ordering: .relaxed)
                        // Back, so that commits etcd acknowledged return once the replica shows them.
                        continuation.resume(returning: Result { try cluster.restart(0) })
                    }
                }
                // Without the member, commits wait for their revision until the store closes.
                if case .failure = restarted { try? store.close() }
                var outcomes: [(key: String, outcome: String)] = []
                for await part in group { outcomes += part }
                return (outcomes, restarted)
            }
            try restarted.get()
            #expect(progress.acknowledged.load(ordering: .relaxed) >= 40, "round \(round): the writers did not get 40 commits acknowledged")
            let reader = try await Store.open(etcd: cluster.endpoints, prefix: "stop/", options: options)
            defer { try? reader.close() }
            let stored = Set(try await reader.read { try $0.scan(prefix: bytes("\(round)/")) }.map { String(decoding: $0.key, as: UTF8.self) })
            for (key, outcome) in outcomes {
                switch outcome {
                case "acknowledged": #expect(stored.contains(key), "round \(round): \(key) was acknowledged and is not in the store")
                case "not written": #expect(!stored.contains(key), "round \(round): \(key) failed as not written and is in the store")
                case "unknown": if stored.contains(key) { appliedButFailed.append(key) }
                default: Issue.record("round \(round): \(key) \(outcome)")
                }
            }
        }
        print("EtcdStoreTests: \(rounds) rounds; failed commits found applied: \(appliedButFailed)")
        if mustCatch || rounds == 30 {
            #expect(!appliedButFailed.isEmpty, "no stop in \(rounds) rounds caught a commit in flight that was applied")
        }
    }
}

/// How many commits the writers of a test had acknowledged, and whether they should stop.
private final class WriterProgress: Sendable {
    let acknowledged = Atomic(0)
    let stopping = Atomic(false)
}

extension EtcdStoreTests {
    /// The blocking API over etcd (a plain function, so `write` is the synchronous one),
    /// and a context older than the versions the store keeps revisions for.
    @Test func blockingCommitsWorkAndAContextOlderThanTheRetainedVersionsIsTooOld() async throws {
        var options = EtcdServer.options
        options.retainedVersions = 2
        let store = try await Store.open(etcd: [EtcdServer.shared.get().endpoint], prefix: "old-\(UUID().uuidString)/",
                                         options: options)
        defer { try? store.close() }
        let old = store.makeContext()
        try Self.blockingWrites(store, count: 6)
        #expect(try await store.read { try $0.get(bytes("k5")) } == bytes("v"), "a blocking commit returns once the replica shows it")
        try old.put(bytes("late"), bytes("x"))
        #expect { try old.commit() } throws: { error in
            guard case let EtcdError.snapshotTooOld(version, oldest) = error else { return false }
            return version < oldest
        }
    }

    /// A store over etcd has no files of its own to copy: `backup` and `compact` say so and
    /// name etcd's tool; the status and a checkpoint are its local replica's.
    @Test func copiesOfAStoreOverEtcdAreRefusedNamingWhereItsDataLives() async throws {
        let store = try await EtcdServer.makeStore()
        defer { try? store.close() }
        try await store.write { unit in try unit.put(bytes("k"), bytes("v")) }
        #expect(!store.isEmbedded)
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("strata-etcd-copy-\(UUID().uuidString)").path
        #expect { try store.backup(to: directory) } throws: { error in
            guard case let EngineError.notEmbedded(operation, location) = error else { return false }
            return operation == "backup(to:)" && location.hasPrefix("etcd") && "\(error)".contains("etcdctl snapshot save")
        }
        #expect { try store.compact(to: directory) } throws: { error in
            guard case EngineError.notEmbedded(operation: "compact(to:)", _) = error else { return false }
            return true
        }
        #expect(!FileManager.default.fileExists(atPath: directory), "a refused copy creates nothing")
        try store.checkpoint()
        #expect(try store.status().version == store.version)
    }

    /// A blocking delete (a plain function, so `write` is the synchronous one).
    static func deleteBlocking(_ store: Store, _ key: [UInt8]) throws {
        try store.write { unit in try unit.delete(key) }
    }

    static func blockingWrites(_ store: Store, count: Int) throws {
        for index in 0..<count { try store.write { unit in try unit.put(bytes("k\(index)"), bytes("v")) } }
    }
}

extension Context {
    /// A root commit of one put: how the closed-store check reaches the backend.
    func commitPut() throws {
        try put(bytes("x"), bytes("y"))
        try commit()
    }
}

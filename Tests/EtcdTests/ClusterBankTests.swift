// The bank test against a three-member etcd cluster with TLS (client certificates required)
// and authentication on: two OS processes (Tests/EtcdBankProcess) transfer money between
// accounts while, at random, the leader is killed or stopped and restarted, a member is cut
// off for a few seconds (every connection into it dropped and refused: EtcdCluster's
// one-way partition), or one of the processes is SIGKILLed and started again. This process follows every committed state through the change feed and checks the
// total in each; afterwards every acknowledged transfer is in the store, every commit whose
// outcome was unknown was resolved by reading and is in the store as resolved, and the
// balances are exactly the initial ones moved by the transfers the store holds.
//
// After each leader loss it measures how long until commits resume (three more transfers
// acknowledged: at most two can have been in flight when the leader died) and prints it.
// With STRATA_TIMING_CHECKS=1 it also checks each against raft's longest election (twice
// the election timeout, its randomized upper bound) plus one request timeout: CI runs the
// test alone that way (.ci/run), since inside the whole suite, hundreds of tests share two
// cores with the three members and the two processes, and one run saw 18 s.
import Foundation
import Strata
import StrataEtcd
import StrataTesting
import Testing

@Suite(.hangLimit) struct ClusterBankTests {
    static let events = 24
    static let requestTimeout = 3.0

    @Test func twoProcessesTransferThroughLeaderLossPartitionsAndKillsOnATLSClusterWithAuth() async throws {
        let seed = UInt64.random(in: 1...UInt64(Int64.max))
        print("ClusterBankTests seed: \(seed)")
        var random = SplitMix64(seed: seed)
        var configuration = EtcdCluster.Configuration(members: 3, tls: true, clientCertificates: true, rootPassword: "root-\(UUID().uuidString)")
        configuration.maxTxnOps = 1024
        let cluster = try EtcdCluster(configuration)
        defer { cluster.shutdown() }
        let certificates = try #require(cluster.certificates)
        let prefix = "bank/", user = "bank", password = "pw-\(UUID().uuidString)"
        try cluster.addUser(user, password: password, readWritePrefix: prefix)

        var options = EtcdOptions()
        options.maxTxnOps = 1024
        options.requestTimeout = .seconds(Self.requestTimeout)
        options.tls = EtcdTLS(trustedCAFile: certificates.caFile, certificateFile: certificates.clientCertificateFile,
                              keyFile: certificates.clientKeyFile)
        options.credentials = EtcdCredentials(user: user, password: password)
        let total = TwoProcessBankTests.accounts * TwoProcessBankTests.initialBalance
        let store = try await Store.open(etcd: cluster.endpoints, prefix: prefix, options: options)
        defer { try? store.close() }
        try await store.write { unit in
            for index in 0..<TwoProcessBankTests.accounts {
                try unit.put(TwoProcessBankTests.account(index), bytes(String(TwoProcessBankTests.initialBalance)))
            }
        }
        let follower = try await TwoProcessBankTests.follow(store, total: total)

        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("strata-cluster-bank-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        var bank = BankProcesses(endpoints: cluster.endpoints, prefix: prefix, directory: directory, total: total)
        bank.environment = [
            "STRATA_ETCD_CA": certificates.caFile, "STRATA_ETCD_CERT": certificates.clientCertificateFile,
            "STRATA_ETCD_KEY": certificates.clientKeyFile, "STRATA_ETCD_USER": user, "STRATA_ETCD_PASSWORD": password,
            "STRATA_ETCD_TIMEOUT": String(Self.requestTimeout),
        ]
        // Two lanes of processes, each running until it is killed or the events are over.
        var names = ["a1", "b1"]
        var running: [Int: (name: String, process: Process)] = [:]
        defer { for (_, entry) in running where entry.process.isRunning { kill(entry.process.processIdentifier, SIGKILL) } }
        for lane in 0..<2 { running[lane] = (names[lane], try bank.start(names[lane], seconds: 3_600, seed: random.next())) }
        #expect(try await bank.waitForAcknowledgements(of: "a1", atLeast: 5))

        let bound = 2 * Double(configuration.electionTimeoutMilliseconds) / 1_000 + Self.requestTimeout
        var resumptions: [Double] = [], log: [String] = []
        for event in 0..<Self.events {
            switch random.next() % 3 {
            case 0:
                let leader = try cluster.waitForLeader()
                let before = bank.acknowledgedCount(of: names)
                let killed = ContinuousClock.now
                // SIGKILL, or a graceful stop (SIGTERM) as an operator's restart does.
                let graceful = random.next() % 2 == 0
                if graceful { cluster.stop(leader) } else { cluster.kill(leader) }
                // Commits resume once a new leader is elected and the unknown outcomes resolve.
                var resumed: Duration?
                while ContinuousClock.now - killed < .seconds(60) {
                    if bank.acknowledgedCount(of: names) >= before + 3 {
                        resumed = ContinuousClock.now - killed
                        break
                    }
                    try await Task.sleep(for: .milliseconds(20))
                }
                let seconds = try #require(resumed, "commits did not resume within 60 s of killing leader m\(leader)").seconds
                resumptions.append(seconds)
                log.append("\(event): \(graceful ? "stopped" : "killed") leader m\(leader), commits resumed after \(String(format: "%.2f", seconds)) s")
                try await Task.sleep(for: .milliseconds(200 + Int(random.next() % 800)))
                try cluster.restart(leader)
            case 1:
                let member = Int(random.next() % 3)
                cluster.partition(member)
                try await Task.sleep(for: .milliseconds(1_000 + Int(random.next() % 2_000)))
                try cluster.heal(member)
                log.append("\(event): cut off m\(member)")
            default:
                let lane = Int(random.next() % 2)
                let entry = try #require(running[lane])
                kill(entry.process.processIdentifier, SIGKILL)
                entry.process.waitUntilExit()
                #expect(entry.process.terminationReason == .uncaughtSignal, "\(entry.name) ended before it was killed: \(bank.errors(of: entry.name))")
                let name = "\(lane == 0 ? "a" : "b")\(names.count + 1)"
                names.append(name)
                running[lane] = (name, try bank.start(name, seconds: 3_600, seed: random.next()))
                log.append("\(event): killed \(entry.name), started \(name)")
            }
            // Every member up before the next event (a kill's restart may still be electing).
            _ = try cluster.waitForLeader()
            try await Task.sleep(for: .milliseconds(300 + Int(random.next() % 700)))
        }
        // The processes still running end; each must not have failed.
        for (_, entry) in running {
            kill(entry.process.processIdentifier, SIGKILL)
            entry.process.waitUntilExit()
            #expect(entry.process.terminationReason == .uncaughtSignal, "\(entry.name) failed: \(bank.errors(of: entry.name))")
        }
        running = [:]

        let (transfers, states) = try await TwoProcessBankTests.check(store, follower: follower, bank: bank, names: names, total: total)
        let resolved = names.reduce(0) { $0 + bank.resolutions(of: $1).count }
        for line in log { print("ClusterBankTests: \(line)") }
        print("ClusterBankTests: \(Self.events) events, \(transfers.count) transfers (\(resolved) unknown outcomes resolved by reading), "
              + "\(states) states checked; commits resumed after a leader loss in at most "
              + "\(String(format: "%.2f", resumptions.max() ?? 0)) s (bound \(String(format: "%.1f", bound)) s)")
        if ProcessInfo.processInfo.environment["STRATA_TIMING_CHECKS"] == "1" {
            #expect(resumptions.allSatisfy { $0 <= bound }, "commits resumed later than \(bound) s after a leader loss: \(resumptions)")
        }
    }
}

extension Duration {
    var seconds: Double { Double(components.seconds) + Double(components.attoseconds) / 1e18 }
}

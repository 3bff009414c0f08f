// Two OS processes (Tests/EtcdBankProcess) transfer money between accounts through one etcd
// while one of them is killed with SIGKILL mid-stream and started again. This process
// follows every committed state through the change feed (one change set per etcd revision)
// and checks the total in each; afterwards, every transfer a process logged as
// acknowledged is in the store, and the balances are exactly the initial ones moved by the
// transfers the store holds: each transfer and its two balance changes landed together.
import Foundation
import Strata
import StrataEtcd
import TestBackends
import Testing

@Suite(.hangLimit) struct TwoProcessBankTests {
    static let accounts = 20
    static let initialBalance = 1_000

    @Test func twoProcessesTransferWhileOneIsKilledAndRestartedAndTheTotalHoldsInEveryState() async throws {
        let seed = UInt64.random(in: 1...UInt64(Int64.max))
        print("TwoProcessBankTests seed: \(seed)")
        let server = try EtcdServer.shared.get()
        let prefix = "bank-\(UUID().uuidString)/"
        let total = Self.accounts * Self.initialBalance
        let store = try await EtcdServer.makeStore(prefix: prefix)
        defer { try? store.close() }
        try await store.write { unit in
            for index in 0..<Self.accounts { try unit.put(Self.account(index), bytes(String(Self.initialBalance))) }
        }

        let follower = try await Self.follow(store, total: total)
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("strata-bank-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let bank = BankProcesses(endpoints: [server.endpoint], prefix: prefix, directory: directory, total: total)
        // The first runs until it is killed: on a loaded machine 20 transfers can take longer
        // than any time it would be given.
        let first = try bank.start("a1", seconds: 3_600, seed: seed)
        defer { if first.isRunning { kill(first.processIdentifier, SIGKILL) } }
        let second = try bank.start("b1", seconds: 6, seed: seed &+ 1)
        // Kill the first once it has acknowledged transfers, while it is still making them.
        #expect(try await bank.waitForAcknowledgements(of: "a1", atLeast: 20))
        kill(first.processIdentifier, SIGKILL)
        first.waitUntilExit()
        #expect(first.terminationReason == .uncaughtSignal,
                "the first process ended before it was killed: \(bank.errors(of: "a1"))")
        let restarted = try bank.start("a2", seconds: 3, seed: seed &+ 2)
        for (name, process) in [("b1", second), ("a2", restarted)] {
            while process.isRunning { try await Task.sleep(for: .milliseconds(50)) }
            #expect(process.terminationStatus == 0, "\(name) failed: \(bank.errors(of: name))")
        }

        let (transfers, states) = try await Self.check(store, follower: follower, bank: bank, names: ["a1", "b1", "a2"], total: total)
        for name in ["a1", "b1", "a2"] { #expect(try !bank.acknowledgements(of: name).isEmpty, "\(name) acknowledged no transfer") }
        print("TwoProcessBankTests: \(transfers.count) transfers, \(states) states checked")
    }

    /// Follows every state of `store` from now on, in revision order, through its change
    /// feed, checking the accounts' total in each, until a commit writes `finished`.
    static func follow(_ store: Store, total: Int) async throws -> Task<(states: Int, wrong: [String], balances: [String: Int]), any Error> {
        let (start, startBalances) = try await store.read { context in
            (context.version, Self.balances(try context.scan(prefix: bytes("acct/"))))
        }
        let feed = try store.changes(after: start, bufferLimit: 1_000_000)
        return Task { () throws -> (states: Int, wrong: [String], balances: [String: Int]) in
            var balances = startBalances, states = 0, wrong: [String] = []
            for try await changeSet in feed {
                var finished = false
                for change in changeSet.changes {
                    let key = String(decoding: change.key, as: UTF8.self)
                    if key.hasPrefix("acct/") { balances[key] = change.value.flatMap { Int(String(decoding: $0, as: UTF8.self)) } }
                    if key == "finished" { finished = true }
                }
                states += 1
                let sum = balances.values.reduce(0, +)
                if sum != total { wrong.append("version \(changeSet.version) totals \(sum)") }
                if finished { return (states, wrong, balances) }
            }
            return (states, wrong, balances)
        }
    }

    /// After the bank processes `names` ended: every followed state held the total, the
    /// balances are the initial ones moved by exactly the transfers in the store, every
    /// acknowledged transfer is there, and every unknown outcome a process resolved by
    /// reading is in the store as it was resolved. Returns the transfers (key → record) and
    /// how many states were followed.
    static func check(_ store: Store, follower: Task<(states: Int, wrong: [String], balances: [String: Int]), any Error>,
                      bank: BankProcesses, names: [String], total: Int) async throws -> (transfers: [String: String], states: Int) {
        // A last commit from this store: once it returns, its replica holds every revision before it.
        try await store.write { unit in try unit.put(bytes("finished"), bytes("")) }
        let followed = try await follower.value
        #expect(followed.wrong.isEmpty, "states with the wrong total: \(followed.wrong.prefix(5))")

        let (final, transfers) = try await store.read { context in
            (Self.balances(try context.scan(prefix: bytes("acct/"))),
             Dictionary(uniqueKeysWithValues: try context.scan(prefix: bytes("xfer/")).map {
                 (String(decoding: $0.key, as: UTF8.self), String(decoding: $0.value, as: UTF8.self))
             }))
        }
        #expect(final.values.reduce(0, +) == total)
        #expect(final == followed.balances, "the change feed's states end where the store is")
        let applied = transfers.values.filter { $0 != "void" }
        #expect(followed.states >= applied.count + 1, "a state per transfer and the last commit")
        // The initial balances moved by every transfer in the store give the final ones.
        var replayed = Dictionary(uniqueKeysWithValues: (0..<Self.accounts).map {
            (String(decoding: Self.account($0), as: UTF8.self), Self.initialBalance)
        })
        for record in applied {
            let fields = record.split(separator: ",").compactMap { Int($0) }
            try #require(fields.count == 3, "a transfer record reads \(record)")
            replayed[String(decoding: Self.account(fields[0]), as: UTF8.self), default: 0] -= fields[2]
            replayed[String(decoding: Self.account(fields[1]), as: UTF8.self), default: 0] += fields[2]
        }
        #expect(replayed == final)
        for name in names {
            // Every acknowledged transfer is there, a killed process's too.
            let acknowledged = try bank.acknowledgements(of: name)
            let missing = acknowledged.filter { transfers[$0.key] != $0.value }
            #expect(missing.isEmpty, "\(name)'s acknowledged transfers missing or changed: \(missing.prefix(5))")
            // Every unknown outcome is in the store as it was resolved.
            for (key, resolution) in bank.resolutions(of: name) {
                let stored = transfers[key]
                #expect(resolution == "applied" ? stored != nil && stored != "void" : stored == "void",
                        "\(name) resolved \(key) as \(resolution) and the store holds \(stored ?? "nothing")")
            }
        }
        return (transfers, followed.states)
    }

    static func account(_ index: Int) -> [UInt8] { bytes("acct/" + String(format: "%03d", index)) }

    static func balances(_ pairs: [(key: [UInt8], value: [UInt8])]) -> [String: Int] {
        Dictionary(uniqueKeysWithValues: pairs.map {
            (String(decoding: $0.key, as: UTF8.self), Int(String(decoding: $0.value, as: UTF8.self)) ?? .min)
        })
    }
}

/// Starts bank processes and reads what they logged.
struct BankProcesses {
    let endpoints: [String]
    let prefix: String
    let directory: URL
    let total: Int
    /// TLS files, credentials and the request timeout (EtcdBankProcess reads them).
    var environment: [String: String] = [:]

    /// The built bank process: next to the test bundle (same build directory).
    static let executable = builtExecutable("EtcdBankProcess")

    func start(_ name: String, seconds: Double, seed: UInt64) throws -> Process {
        let log = directory.appendingPathComponent("\(name).ack")
        let errors = directory.appendingPathComponent("\(name).err")
        guard FileManager.default.createFile(atPath: log.path, contents: nil),
              FileManager.default.createFile(atPath: errors.path, contents: nil) else {
            throw CocoaError(.fileWriteUnknown, userInfo: [NSFilePathErrorKey: directory.path])
        }
        let process = Process()
        process.executableURL = Self.executable
        process.environment = ProcessInfo.processInfo.environment.merging(environment) { $1 }
        process.arguments = [endpoints.joined(separator: ","), prefix, name, String(TwoProcessBankTests.accounts), String(total), String(seconds), String(seed), log.path]
        process.standardInput = FileHandle.nullDevice
        process.standardOutput = FileHandle.nullDevice
        process.standardError = try FileHandle(forWritingTo: errors)
        try process.run()
        return process
    }

    /// The transfers `name` acknowledged: key → record.
    func acknowledgements(of name: String) throws -> [String: String] {
        let text = try String(contentsOf: directory.appendingPathComponent("\(name).ack"), encoding: .utf8)
        return Dictionary(text.split(separator: "\n").map { line in
            let parts = line.split(separator: " ", maxSplits: 1)
            return (String(parts[0]), parts.count > 1 ? String(parts[1]) : "")
        }, uniquingKeysWith: { first, _ in first })
    }

    /// The unknown outcomes `name` resolved by reading: key → "applied" or "void".
    func resolutions(of name: String) -> [String: String] {
        let text = (try? String(contentsOf: directory.appendingPathComponent("\(name).ack.resolved"), encoding: .utf8)) ?? ""
        return Dictionary(text.split(separator: "\n").map { line in
            let parts = line.split(separator: " ", maxSplits: 1)
            return (String(parts[0]), parts.count > 1 ? String(parts[1]) : "")
        }, uniquingKeysWith: { first, _ in first })
    }

    /// How many transfers the processes `names` acknowledged so far.
    func acknowledgedCount(of names: [String]) -> Int {
        names.reduce(0) { $0 + ((try? acknowledgements(of: $1).count) ?? 0) }
    }

    /// Waits up to 30 seconds for `name` to log `count` acknowledged transfers.
    func waitForAcknowledgements(of name: String, atLeast count: Int) async throws -> Bool {
        for _ in 0..<600 {
            if try acknowledgements(of: name).count >= count { return true }
            try await Task.sleep(for: .milliseconds(50))
        }
        return false
    }

    /// What `name` wrote to its standard error.
    func errors(of name: String) -> String {
        (try? String(contentsOf: directory.appendingPathComponent("\(name).err"), encoding: .utf8)) ?? ""
    }
}

// One bank process of the bank tests (Tests/EtcdTests/TwoProcessBankTests.swift and
// ClusterBankTests.swift): opens the store over etcd and, until its time is up and at least
// one transfer was acknowledged (a loaded machine may need longer than the time), moves
// random amounts between random accounts, one unit of work per transfer, which also writes
// the transfer itself under `xfer/<name>/<n>`. It checks the total of the accounts in a
// snapshot before every transfer, and appends each transfer to its acknowledgement log only
// after its commit returned, so every line there is a transfer the store acknowledged.
//
// A commit whose outcome is unknown is resolved by reading, in a unit of work that reads
// the transfer's key and, when it is absent, writes "void" there: that commit conflicts
// with the lost one should it still be applied later, so once it returns the transfer is
// either in the store or void for good. Each resolution is appended to `<ack-log>.resolved`
// ("<key> applied" or "<key> void"). A commit that wrote nothing (no endpoint reachable,
// say) is tried again after a pause.
//
//   EtcdBankProcess <endpoints> <prefix> <name> <accounts> <total> <seconds> <seed> <ack-log>
//   EtcdBankProcess --start-etcd-and-exit <file>
//
// <endpoints> are comma-separated. TLS and credentials come from the environment:
// STRATA_ETCD_CA, STRATA_ETCD_CERT, STRATA_ETCD_KEY, STRATA_ETCD_USER, STRATA_ETCD_PASSWORD,
// and STRATA_ETCD_TIMEOUT (the request timeout, seconds).
// Exits 0 when its time is up, 3 when a snapshot's total was wrong, 2 on any other error.
import Foundation
import Strata
import StrataEtcd
import StrataTesting

@main enum EtcdBankProcess {
    static func main() async {
        let arguments = CommandLine.arguments
        // `EtcdBankProcess --start-etcd-and-exit <file>`: starts an etcd member, writes its
        // pid and directory to <file> and exits at once (StrataTesting's exit handler must
        // have stopped the member when this process is gone).
        if arguments.count == 3, arguments[1] == "--start-etcd-and-exit" {
            do {
                let etcd = try EtcdProcess()
                try "\(etcd.pid) \(etcd.directory)".write(toFile: arguments[2], atomically: true, encoding: .utf8)
            } catch {
                fail(2, "\(error)")
            }
            return
        }
        guard arguments.count == 9, let accounts = Int(arguments[4]), let total = Int(arguments[5]),
              let seconds = Double(arguments[6]), let seed = UInt64(arguments[7]) else {
            fail(2, "usage: EtcdBankProcess <endpoints> <prefix> <name> <accounts> <total> <seconds> <seed> <ack-log>")
        }
        let (prefix, name, ackPath) = (arguments[2], arguments[3], arguments[8])
        let endpoints = arguments[1].split(separator: ",").map(String.init)
        do {
            let store = try await open(endpoints: endpoints, prefix: prefix)
            guard let ackLog = FileHandle(forWritingAtPath: ackPath),
                  FileManager.default.createFile(atPath: ackPath + ".resolved", contents: nil),
                  let resolvedLog = FileHandle(forWritingAtPath: ackPath + ".resolved") else { fail(2, "cannot open \(ackPath)") }
            ackLog.seekToEndOfFile()
            var random = SplitMix64(seed: seed)
            let deadline = Date().addingTimeInterval(seconds)
            var count = 0, acknowledged = 0
            while Date() < deadline || acknowledged == 0 {
                let from = Int(random.next() % UInt64(accounts))
                let to = (from + 1 + Int(random.next() % UInt64(accounts - 1))) % accounts
                let amount = 1 + Int(random.next() % 50)
                let record = "\(from),\(to),\(amount)"
                let key = "xfer/\(name)/\(count)"
                do {
                    try await store.write(retries: 1_000) { unit in
                        var sum = 0
                        for (_, value) in try unit.scan(prefix: Array("acct/".utf8)) { sum += Int(String(decoding: value, as: UTF8.self))! }
                        guard sum == total else { fail(3, "\(name): a snapshot totals \(sum), not \(total)") }
                        let balances = try [from, to].map { index in
                            Int(String(decoding: try unit.get(account(index))!, as: UTF8.self))!
                        }
                        try unit.put(account(from), Array(String(balances[0] - amount).utf8))
                        try unit.put(account(to), Array(String(balances[1] + amount).utf8))
                        try unit.put(Array(key.utf8), Array(record.utf8))
                    }
                } catch UnitOfWorkError.commitFailed(.outcomeUnknown) {
                    // Not acknowledged: resolved by reading, and never logged as acknowledged.
                    let applied = try await resolve(key, in: store)
                    resolvedLog.write(Data("\(key) \(applied ? "applied" : "void")\n".utf8))
                    count += 1
                    continue
                } catch UnitOfWorkError.commitFailed(.notWritten) {
                    // Nothing was written: the same transfer again, after a pause.
                    try await Task.sleep(for: .milliseconds(100))
                    continue
                }
                // One write(2) per line: a kill leaves whole lines.
                ackLog.write(Data("\(key) \(record)\n".utf8))
                count += 1
                acknowledged += 1
            }
            try store.close()
            print("\(name): \(count) transfers")
        } catch {
            fail(2, "\(name): \(error)")
        }
    }

    /// Opens the store, trying again for up to a minute while the cluster cannot serve
    /// (a member down, an election under way).
    static func open(endpoints: [String], prefix: String) async throws -> Store {
        let environment = ProcessInfo.processInfo.environment
        var options = EtcdOptions()
        options.maxTxnOps = 1024
        if let seconds = environment["STRATA_ETCD_TIMEOUT"].flatMap(Double.init) { options.requestTimeout = .milliseconds(Int(seconds * 1000)) }
        options.tls = EtcdTLS(trustedCAFile: environment["STRATA_ETCD_CA"], certificateFile: environment["STRATA_ETCD_CERT"],
                              keyFile: environment["STRATA_ETCD_KEY"])
        if let user = environment["STRATA_ETCD_USER"] {
            options.credentials = EtcdCredentials(user: user, password: environment["STRATA_ETCD_PASSWORD"] ?? "")
        }
        let deadline = Date().addingTimeInterval(60)
        while true {
            do { return try await Store.open(etcd: endpoints, prefix: prefix, options: options) } catch {
                if Date() > deadline { throw error }
                try await Task.sleep(for: .milliseconds(200))
            }
        }
    }

    /// Whether the transfer at `key`, whose commit's outcome is unknown, is in the store:
    /// reads it in a unit of work that writes "void" there when it is absent. That unit's
    /// own outcome may be unknown too: then it runs again.
    static func resolve(_ key: String, in store: Store) async throws -> Bool {
        while true {
            do {
                return try await store.write(retries: 1_000) { unit in
                    if let value = try unit.get(Array(key.utf8)) { return value != Array("void".utf8) }
                    try unit.put(Array(key.utf8), Array("void".utf8))
                    return false
                }
            } catch UnitOfWorkError.commitFailed(.outcomeUnknown) {
                continue
            } catch UnitOfWorkError.commitFailed(.notWritten) {
                try await Task.sleep(for: .milliseconds(100))
            }
        }
    }

    static func account(_ index: Int) -> [UInt8] { Array("acct/\(String(format: "%03d", index))".utf8) }

    static func fail(_ status: Int32, _ message: String) -> Never {
        FileHandle.standardError.write(Data((message + "\n").utf8))
        exit(status)
    }
}

// One bank process of the two-process bank test (Tests/EtcdTests/TwoProcessBankTests.swift):
// opens the store over etcd and, until its time is up and at least one transfer was
// acknowledged (a loaded machine may need longer than the time), moves random amounts
// between random accounts, one unit of work per transfer, which also writes the transfer
// itself under `xfer/<name>/<n>`. It checks the total of the accounts in a snapshot before every
// transfer, and appends each transfer to its acknowledgement log only after its commit
// returned, so every line there is a transfer the store acknowledged.
//
//   EtcdBankProcess <endpoint> <prefix> <name> <accounts> <total> <seconds> <seed> <ack-log>
//
// Exits 0 when its time is up, 3 when a snapshot's total was wrong, 2 on any other error.
import Foundation
import Strata
import StrataEtcd
import StrataTesting

@main enum EtcdBankProcess {
    static func main() async {
        let arguments = CommandLine.arguments
        guard arguments.count == 9, let accounts = Int(arguments[4]), let total = Int(arguments[5]),
              let seconds = Double(arguments[6]), let seed = UInt64(arguments[7]) else {
            fail(2, "usage: EtcdBankProcess <endpoint> <prefix> <name> <accounts> <total> <seconds> <seed> <ack-log>")
        }
        let (endpoint, prefix, name, ackPath) = (arguments[1], arguments[2], arguments[3], arguments[8])
        do {
            var options = EtcdOptions()
            options.maxTxnOps = 1024
            let store = try await Store.open(etcd: [endpoint], prefix: prefix, options: options)
            guard let ackLog = FileHandle(forWritingAtPath: ackPath) else { fail(2, "cannot open \(ackPath)") }
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
                    // Not acknowledged: it may or may not be in the store; never logged.
                    count += 1
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

    static func account(_ index: Int) -> [UInt8] { Array("acct/\(String(format: "%03d", index))".utf8) }

    static func fail(_ status: Int32, _ message: String) -> Never {
        FileHandle.standardError.write(Data((message + "\n").utf8))
        exit(status)
    }
}

// The bank suite, in process: eight writer threads transfer between 100 accounts
// with units of work (retrying on conflict) while reader threads check, in every
// snapshot they take, that the total is unchanged. On a real directory, so group commit
// and fdatasync are the real ones.
import Strata
import StrataTesting
import Foundation
import Testing

@Suite struct ConcurrentBankTests {
    static let accounts = 100
    static let opening = 100

    static func key(_ account: Int) -> [UInt8] { Array("acct/\(account)".utf8) }

    static func total(_ context: Context) throws -> Int {
        try context.scan(prefix: Array("acct/".utf8)).reduce(0) { $0 + Int(String(decoding: $1.value, as: UTF8.self))! }
    }

    @Test(arguments: [UInt64(21)])
    func readersSeeTheSameTotalInEverySnapshotWhileWritersTransfer(seed: UInt64) throws {
        print("ConcurrentBankTests seed \(seed)")
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("strata-bank-\(UUID().uuidString)").path
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let store = try Store.open(path: directory)
        try store.write { unit in
            for account in 0..<Self.accounts { try unit.put(Self.key(account), Array("\(Self.opening)".utf8)) }
        }
        let writersDone = Shared(0)
        let snapshotsChecked = Shared(0)
        let badTotals = Shared<[Int]>([])
        let failures = Shared<[String]>([])
        let threads = DispatchGroup()
        for writer in 0..<8 {
            threads.enter()
            Thread.detachNewThread {
                defer { writersDone.withLock { $0 += 1 }; threads.leave() }
                var random = SplitMix64(seed: seed &+ UInt64(writer))
                for _ in 0..<50 {
                    let from = Int(random.next() % UInt64(Self.accounts))
                    let to = (from + 1 + Int(random.next() % UInt64(Self.accounts - 1))) % Self.accounts
                    let amount = Int(random.next() % 20) + 1
                    do {
                        try store.write(retries: 1_000) { unit in
                            let debit = Int(String(decoding: try unit.get(Self.key(from))!, as: UTF8.self))!
                            try unit.put(Self.key(from), Array("\(debit - amount)".utf8))
                            try unit.child { nested in
                                let credit = Int(String(decoding: try nested.get(Self.key(to))!, as: UTF8.self))!
                                try nested.put(Self.key(to), Array("\(credit + amount)".utf8))
                            }
                        }
                    } catch {
                        failures.withLock { $0.append("\(error)") }
                    }
                }
            }
        }
        for _ in 0..<2 {
            threads.enter()
            Thread.detachNewThread {
                defer { threads.leave() }
                repeat {
                    do {
                        let total = try store.read { try Self.total($0) }
                        if total != Self.accounts * Self.opening { badTotals.withLock { $0.append(total) } }
                        snapshotsChecked.withLock { $0 += 1 }
                    } catch {
                        failures.withLock { $0.append("\(error)") }
                    }
                } while writersDone.withLock({ $0 }) < 8
            }
        }
        threads.wait()
        #expect(failures.withLock { $0 }.isEmpty, "\(failures.withLock { $0.prefix(3) })")
        #expect(badTotals.withLock { $0 }.isEmpty)
        #expect(store.version == 1 + 400)
        print("400 transfers by 8 threads; \(snapshotsChecked.withLock { $0 }) snapshots checked; "
              + "\(store.engine.logStatistics.groupCount) group commits")
        try store.close()
        let reopened = try Store.open(path: directory)
        #expect(try Self.total(reopened.makeContext()) == Self.accounts * Self.opening)
        try reopened.close()
    }
}

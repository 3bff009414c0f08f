// Crashes under units of work: a bank whose transfers are units of work (with nested
// units, some rolled back) is crashed at every I/O operation. After recovery the money
// adds up (a unit of work is all or nothing), the state is that after a prefix of the
// units, and every acknowledged unit is in it (docs/Durability.md: I1 and I2).
import Strata
import StrataTesting
import Testing

@Suite struct UnitOfWorkCrashTests {
    static let accountCount = 8
    static let openingBalance = 100

    static func account(_ index: Int) -> [UInt8] { bytes("account/\(index)") }

    /// Opens the bank and runs `transfers` units of work. Returns the balances after each
    /// acknowledged unit (index 0: after opening).
    static func runBank(_ fileSystem: SimulatedFileSystem, seed: UInt64, transfers: Int,
                        options: EngineOptions) -> [[Int]] {
        var states: [[Int]] = []
        guard let store = try? Store.open(path: "/bank", fileSystem: fileSystem, options: options) else { return states }
        var balances = [Int](repeating: openingBalance, count: accountCount)
        let opened: Void? = try? store.write { unit in
            for index in 0..<accountCount { try unit.put(account(index), bytes("\(openingBalance)")) }
        }
        guard opened != nil else { return states }
        states.append(balances)
        var random = SplitMix64(seed: seed)
        for transfer in 1...transfers {
            let from = Int(random.next() % UInt64(accountCount))
            let to = (from + 1 + Int(random.next() % UInt64(accountCount - 1))) % accountCount
            let amount = Int(random.next() % 30) + 1
            let rollBackFee = random.next() % 3 == 0
            do {
                try store.write { unit in
                    let fromBalance = Int(text(try unit.get(account(from)))!)!
                    let toBalance = Int(text(try unit.get(account(to)))!)!
                    try unit.put(account(from), bytes("\(fromBalance - amount)"))
                    // A nested unit that moves the money in; a fee that is sometimes rolled back.
                    try unit.child { nested in try nested.put(account(to), bytes("\(toBalance + amount)")) }
                    try? unit.child { nested in
                        try nested.put(account(to), bytes("\(toBalance + amount - 1)"))
                        if rollBackFee { throw CancellationError() }
                        try nested.put(account(from), bytes("\(fromBalance - amount + 1)"))
                    }
                }
            } catch {
                break
            }
            balances[from] -= amount
            balances[to] += amount
            if !rollBackFee {
                balances[to] -= 1
                balances[from] += 1
            }
            states.append(balances)
            if transfer % 10 == 0 { guard (try? store.engine.checkpoint()) != nil else { break } }
        }
        try? store.close()
        return states
    }

    static func balances(_ store: Store) throws -> [Int] {
        try (0..<accountCount).map { Int(text(try store.makeContext().get(account($0)))!)! }
    }

    @Test(arguments: [Durability.full, .relaxed])
    func aCrashAtEveryOperationKeepsUnitsOfWorkWhole(durability: Durability) throws {
        let seed: UInt64 = 11
        print("UnitOfWorkCrashTests seed \(seed), durability \(durability)")
        var options = EngineOptions(durability: durability)
        options.log.segmentBytes = 8 << 10
        let dry = SimulatedFileSystem()
        let allStates = Self.runBank(dry, seed: seed, transfers: 100, options: options)
        #expect(allStates.count == 101)
        let operations = dry.operationCount
        for cut in 0..<operations {
            let fileSystem = SimulatedFileSystem()
            fileSystem.cutPower(atOperation: cut)
            let states = Self.runBank(fileSystem, seed: seed, transfers: 100, options: options)
            // `.full` promises survival of a power loss; `.relaxed` of a process kill.
            fileSystem.crash(durability == .full ? .random(seed: seed &+ UInt64(cut)) : .keepAll)
            let store = try Store.open(path: "/bank", fileSystem: fileSystem, options: options)
            if states.isEmpty {
                // The bank never opened: no account, or all of them.
                let present = try (0..<Self.accountCount).filter { try store.makeContext().contains(Self.account($0)) }
                #expect(present.isEmpty || present.count == Self.accountCount, "cut \(cut)")
            } else {
                let recovered = try Self.balances(store)
                #expect(recovered.reduce(0, +) == Self.accountCount * Self.openingBalance, "cut \(cut): money was created or lost")
                let acknowledged = states.count - 1
                let prefix = allStates.indices.filter { allStates[$0] == recovered }
                #expect(prefix.contains { $0 >= acknowledged }, "cut \(cut): not a prefix with all \(acknowledged) acknowledged units")
            }
            #expect(store.engine.verify().isValid, "cut \(cut)")
            try store.close()
        }
        print("crashed the bank at each of \(operations) operations")
    }
}

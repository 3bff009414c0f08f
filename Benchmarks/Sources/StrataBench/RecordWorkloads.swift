// The record workloads: typed records with two secondary indexes (a unique email, a
// city shared by many) on Strata's repositories, next to SQLite doing the same with an
// indexed table (`people(id INTEGER PRIMARY KEY, email TEXT UNIQUE, city TEXT, age
// INTEGER)` plus an index on city, prepared statements, one transaction per batch).
//  - records-insert: insert N records, B per transaction (each also writes its index entries);
//  - records-fetch: after an untimed insert, N fetches of one record by its email.
// Expectation: both are CPU-bound (encoding, index maintenance, predicate evaluation).
import Strata
import StrataTesting
import CSQLite
import Foundation

struct Person: Record {
    var id: Int
    var email: String
    var city: String
    var age: Int

    static var indexes: [RecordIndex<Person>] { [.index(\Person.email, unique: true), .index(\Person.city)] }

    init(_ number: Int) {
        id = number
        email = "person\(number)@example.org"
        city = "city\(number % 1_000)"
        age = 18 + number % 70
    }
}

struct RecordWorkloads {
    let engine: String
    let workload: String
    let options: StrataBench

    func run() throws -> Result {
        let count = options.num ?? 100_000
        let directory = (options.dir as NSString).appendingPathComponent("strata-bench-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(atPath: directory) }
        var order = Array(0..<count)
        var shuffler = SplitMix64(seed: options.seed)
        order.shuffle(using: &shuffler)
        let seconds: Double
        if engine == "sqlite" {
            let table = try PeopleTable(directory: directory)
            defer { table.close() }
            if workload == "records-fetch" { try table.insert(order, batch: options.batch) }
            seconds = try timed {
                if workload == "records-insert" { try table.insert(order, batch: options.batch) } else {
                    for number in order {
                        guard try table.idForEmail(Person(number).email) == number else {
                            throw BenchError(description: "sqlite did not find person \(number)")
                        }
                    }
                }
            }
        } else {
            let store = try Store.open(path: directory)
            defer { try? store.close() }
            let insert = {
                for start in stride(from: 0, to: count, by: options.batch) {
                    try store.write { unit in
                        let people = unit.repository(Person.self)
                        for number in order[start..<min(count, start + options.batch)] { try people.insert(Person(number)) }
                    }
                }
            }
            if workload == "records-fetch" { try insert() }
            seconds = try timed {
                if workload == "records-insert" { try insert() } else {
                    try store.read { context in
                        let people = context.repository(Person.self)
                        for number in order {
                            let email = Person(number).email
                            guard try people.first(#Predicate<Person> { $0.email == email })?.id == number else {
                                throw BenchError(description: "strata did not find person \(number)")
                            }
                        }
                    }
                }
            }
        }
        return Result(engine: engine, bench: workload, num: count, batch: workload == "records-insert" ? options.batch : 1,
                      valueSize: 0, seconds: seconds, bytesOnDisk: 0, fdatasyncs: nil)
    }

    private func timed(_ body: () throws -> Void) throws -> Double {
        let elapsed = try ContinuousClock().measure(body)
        return Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
    }
}

/// SQLite's side: an indexed table of people.
final class PeopleTable {
    private var db: OpaquePointer?
    private var insert: OpaquePointer?
    private var byEmail: OpaquePointer?
    private let transient = unsafeBitCast(-1, to: sqlite3_destructor_type.self)

    init(directory: String) throws {
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        guard sqlite3_open(directory + "/people.db", &db) == SQLITE_OK else { throw BenchError(description: "sqlite3_open failed") }
        for sql in ["PRAGMA journal_mode=WAL", "PRAGMA synchronous=FULL",
                    "CREATE TABLE people (id INTEGER PRIMARY KEY, email TEXT UNIQUE, city TEXT, age INTEGER)",
                    "CREATE INDEX people_city ON people (city)"] {
            try exec(sql)
        }
        insert = try prepare("INSERT INTO people (id, email, city, age) VALUES (?, ?, ?, ?)")
        byEmail = try prepare("SELECT id, email, city, age FROM people WHERE email = ?")
    }

    private func exec(_ sql: String) throws {
        guard sqlite3_exec(db, sql, nil, nil, nil) == SQLITE_OK else {
            throw BenchError(description: "sqlite: \(sql): \(String(cString: sqlite3_errmsg(db)))")
        }
    }

    private func prepare(_ sql: String) throws -> OpaquePointer? {
        var statement: OpaquePointer?
        guard sqlite3_prepare_v2(db, sql, -1, &statement, nil) == SQLITE_OK else { throw BenchError(description: "prepare \(sql)") }
        return statement
    }

    func insert(_ numbers: [Int], batch: Int) throws {
        for start in stride(from: 0, to: numbers.count, by: batch) {
            try exec("BEGIN")
            for number in numbers[start..<min(numbers.count, start + batch)] {
                let person = Person(number)
                sqlite3_reset(insert)
                sqlite3_bind_int64(insert, 1, Int64(person.id))
                sqlite3_bind_text(insert, 2, person.email, -1, transient)
                sqlite3_bind_text(insert, 3, person.city, -1, transient)
                sqlite3_bind_int64(insert, 4, Int64(person.age))
                guard sqlite3_step(insert) == SQLITE_DONE else { throw BenchError(description: "sqlite insert failed") }
            }
            try exec("COMMIT")
        }
    }

    func idForEmail(_ email: String) throws -> Int? {
        sqlite3_reset(byEmail)
        sqlite3_bind_text(byEmail, 1, email, -1, transient)
        guard sqlite3_step(byEmail) == SQLITE_ROW else { return nil }
        // Read the whole row, as the record fetch decodes the whole record.
        _ = sqlite3_column_text(byEmail, 1)
        _ = sqlite3_column_text(byEmail, 2)
        _ = sqlite3_column_int64(byEmail, 3)
        return Int(sqlite3_column_int64(byEmail, 0))
    }

    func close() {
        sqlite3_finalize(insert)
        sqlite3_finalize(byEmail)
        sqlite3_close(db)
    }
}

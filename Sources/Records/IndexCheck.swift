// Checking that indexes say what their records imply (X1): the typed check a repository
// runs (`Repository.checkIndexes()`), and the check that needs no type (`Store.checkIndexEntries()`),
// which `strata verify` runs on any store.
import StrataContexts
import Foundation
import StrataEngine

extension Repository {
    /// Every problem with this entity's built indexes, as sentences (empty when sound): a
    /// record missing an entry its value implies, an entry holding another id, or an entry
    /// that no record implies (dangling). Indexes the manifest does not list are not built
    /// yet and not checked. Stages nothing.
    public func checkIndexes() throws -> [String] {
        let entity = RecordTypeCache.entityName(of: R.self)
        let built = try IndexMaintenance<R>(context: context, shape: shape).usableIndexes()
        guard !built.isEmpty else { return [] }
        var problems: [String] = []
        var implied = Set<[UInt8]>()
        for record in try all() {
            for index in built {
                let (key, value) = IndexMaintenance<R>.entry(index, record)
                implied.insert(key)
                let held = try context.get(key)
                if held != value {
                    problems.append(held == nil
                        ? "\(entity) \(record.id) has no entry in index \(index.name) for \(index.render(record))"
                        : "index \(index.name) of \(entity) gives \(index.render(record)) to another record than \(record.id)")
                }
            }
        }
        for index in built {
            for (key, _) in try context.scan(prefix: RecordKeys.indexPrefix(entity: entity, index: index.name))
            where !implied.contains(key) {
                problems.append("index \(index.name) of \(entity) holds an entry no record implies (\(renderKey(key)))")
            }
        }
        return problems
    }
}

extension Store {
    /// Checks every record index entry of the store without knowing record types: each
    /// entry must name the id of a record of its entity that exists (a dangling entry makes
    /// a fetch through the index miss or repeat records). Returns the problems (empty when
    /// sound).
    /// `strata verify` runs it; `Repository.checkIndexes()` checks a type fully.
    public func checkIndexEntries() throws -> [String] {
        let context = makeContext()
        defer { context.discard() }
        var problems: [String] = []
        for (key, id) in try context.scan(prefix: [RecordKeys.reservedByte, RecordKeys.indexTag]) {
            guard let records = RecordKeys.recordPrefix(ofIndexKey: key) else {
                problems.append("an index entry's key does not name an entity (\(renderKey(key)))")
                continue
            }
            if try context.get(records + id) == nil {
                problems.append("the index entry \(renderKey(key)) names a record that does not exist (id \(renderKey(id)))")
            }
        }
        return problems
    }
}

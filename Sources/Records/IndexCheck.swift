// Checking that indexes say what their records imply (RecordIndex.X1): the typed check a repository
// runs (`Repository.checkIndexes()`), and the check that needs no type (`Store.checkIndexEntries()`),
// which `strata verify` runs on any store.
import StrataContexts
import Foundation
import StrataEngine

extension Repository {
    /// Every problem with this entity's built indexes and its relationships, as sentences
    /// (empty when sound): a record missing an entry its value implies, an entry holding
    /// another id, an entry that no record implies (dangling), or a record naming in a
    /// relationship a record that does not exist where the delete rule of that record's
    /// side does not allow it (`checkRelationships`). Indexes the manifest does not list are
    /// not built yet and not checked. Stages nothing.
    public func checkIndexes() throws -> [String] {
        let entity = RecordTypeCache.entityName(of: R.self)
        let built = try indexes.usableIndexes()
        var problems = try checkRelationships()
        guard !built.isEmpty else { return problems }
        var implied = Set<[UInt8]>()
        for record in try all() {
            for index in built {
                for (key, value) in IndexMaintenance<R>.entries(index, record) {
                    implied.insert(key)
                    let held = try context.get(key)
                    if held != value {
                        problems.append(held == nil
                            ? "\(entity) \(record.id) has no entry in index \(index.name) for \(index.render(record))"
                            : "index \(index.name) of \(entity) gives \(index.render(record)) to another record than \(record.id)")
                    }
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

extension Repository {
    /// Every record of this entity that names, in a relationship it holds, a record that
    /// does not exist, where the other side's delete rule is not `.noAction` (which allows
    /// it), as sentences. Stages nothing. `checkIndexes()` includes it.
    public func checkRelationships() throws -> [String] {
        guard shape.hasRelationships else { return [] }
        let links = try RecordTypeCache.links(of: R.self).filter { $0.side == .via }
        guard !links.isEmpty else { return [] }
        var problems: [String] = []
        try forEachMatch(nil) { record in
            for link in links { problems += try link.missingTargets(of: record, in: context) }
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
        return problems + (try checkReferences(in: context))
    }

    /// The relationship entries (`ManifestReference`) that name a record that does not
    /// exist where that is not allowed, found from the manifests alone.
    private func checkReferences(in context: Context) throws -> [String] {
        var problems: [String] = []
        for (manifestKey, bytes) in try context.scan(prefix: [RecordKeys.reservedByte, RecordKeys.manifestTag]) {
            guard let manifest = try? RecordManifest(bytes), manifestKey.count > 2 else { continue }
            // The manifest key is the entity's name under its tag: the same under the
            // record and index tags begins its records' and indexes' keys.
            let name = Array(manifestKey[2...])
            let entity = RecordKeys.entityName(ofPrefix: [RecordKeys.reservedByte, RecordKeys.recordTag] + name)
            for reference in manifest.references where !reference.mayDangle {
                let prefix = [RecordKeys.reservedByte, RecordKeys.indexTag] + name + RecordKeys.varint(reference.index.utf8.count)
                    + Array(reference.index.utf8)
                for (key, referrer) in try context.scan(prefix: prefix) {
                    guard let target = Self.target(of: key.dropFirst(prefix.count), reference) else {
                        problems.append("the entry \(renderKey(key)) of \(entity)'s index \(reference.index) does not hold an id of a \(reference.entity)")
                        continue
                    }
                    guard let id = target, try !context.contains(RecordKeys.prefix(entity: reference.entity) + id) else { continue }
                    problems.append("\(entity) \(renderKey(referrer)) refers to \(reference.entity) \(renderKey(id)) (index \(reference.index)), "
                        + "which does not exist")
                }
            }
        }
        return problems
    }

    /// The id key bytes a relationship index entry's value bytes name: nil inside when the
    /// entry names none (an optional's nil), nil when they are not as `reference` says.
    private static func target(of bytes: ArraySlice<UInt8>, _ reference: ManifestReference) -> [UInt8]?? {
        var rest = bytes
        if reference.optional {
            guard let marker = rest.first else { return nil }
            if marker == 0 { return .some(nil) }
            guard marker == 1 else { return nil }
            rest = rest.dropFirst()
        }
        if reference.idWidth > 0 {
            guard rest.count >= reference.idWidth else { return nil }
            return .some(Array(rest.prefix(reference.idWidth)))
        }
        return unescapedIndexBytes(rest).map { .some($0.bytes) }
    }
}

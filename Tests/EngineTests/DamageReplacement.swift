import Testing
@testable import StrataEngine

extension StorageEngine {
    /// Checkpoints commits that replaced damaged values, which frees the pages the damaged
    /// values took: refused with an error when `refused` (the damage names pages no freeing
    /// may follow), else done, after which the store verifies.
    func checkpointFreeingDamage(refused: Bool, sourceLocation: SourceLocation = #_sourceLocation) throws {
        if refused {
            #expect(throws: EngineError.self, sourceLocation: sourceLocation) { try checkpoint() }
        } else {
            try checkpoint()
            let report = verify()
            #expect(report.isValid, "\(report)", sourceLocation: sourceLocation)
        }
    }
}

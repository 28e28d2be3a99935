package files

import (
	"context"
	"errors"
	"fmt"
)

// sealLegacy seals the blobs that a binary without encryption at rest
// wrote (rows with sealed = 0), one at a time: the sealed copy is written
// to the blob "<id>.seal", the row is marked sealed with its new data key
// in one transaction, and then the copy is renamed over the plaintext.
// A crash between the commit and the rename leaves a ".seal" blob that
// reconcile renames into place on the next open (finishSeal), so a row
// never points at a blob of the other kind for longer than a restart.
//
// Only the SQLite and disk stores have such files (no other
// implementation existed before encryption at rest), so this works on
// them directly.
func (s *Store) sealLegacy(ctx context.Context, meta *SQLiteMetadata, blobs *DiskBlobs) error {
	after := ""
	sealed := 0
	for {
		ids, err := meta.unsealed(ctx, after, 100)
		if err != nil {
			return fmt.Errorf("seal stored files: %w", err)
		}
		if len(ids) == 0 {
			break
		}
		for _, id := range ids {
			if err := s.sealOne(ctx, meta, id); err != nil {
				return fmt.Errorf("seal stored file %s: %w", id, err)
			}
			sealed++
		}
		after = ids[len(ids)-1]
	}
	if sealed > 0 {
		s.log.Info("files: sealed files stored before encryption at rest", "count", sealed)
	}
	return nil
}

func (s *Store) sealOne(ctx context.Context, meta *SQLiteMetadata, id string) error {
	in, _, err := s.blobs.Open(ctx, id)
	if errors.Is(err, ErrBlobNotFound) {
		return nil // a row without its blob: nothing to seal
	}
	if err != nil {
		return err
	}
	defer in.Close()
	dk, wrapped, err := s.keys.NewDataKey(id)
	if err != nil {
		return err
	}
	tmp := id + sealSuffix
	// An earlier attempt's copy, if a crash left one, is replaced.
	if err := s.blobs.Delete(ctx, tmp); err != nil {
		return err
	}
	if _, err := s.putSealed(ctx, tmp, dk, in, 0); err != nil {
		return err
	}
	if err := meta.markSealed(ctx, id, wrapped); err != nil {
		s.discard(ctx, tmp)
		return err
	}
	return s.finishSeal(ctx, id)
}

// finishSeal renames id's sealed copy over its blob when the row says it
// is sealed, and removes the copy otherwise (the crash came before the
// commit, or the file is gone).
func (s *Store) finishSeal(ctx context.Context, id string) error {
	tmp := id + sealSuffix
	wrapped, err := s.meta.DataKey(ctx, id)
	if err != nil && !errors.Is(err, ErrNotFound) {
		return err
	}
	if err != nil || wrapped == nil {
		return s.blobs.Delete(ctx, tmp)
	}
	d, ok := s.blobs.(*DiskBlobs)
	if !ok {
		return fmt.Errorf("files: a sealed copy of %s outside a disk blob store", id)
	}
	return d.rename(tmp, id)
}

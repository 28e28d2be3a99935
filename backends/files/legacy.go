package files

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/switchyard-ai/switchyard/internal/envelope"
)

// sealLegacy seals the blobs that a binary without encryption at rest
// wrote (rows with sealed = 0), one at a time: the sealed copy is written
// to "<id>.seal" and fsynced, the row is marked sealed with its new data
// key in one transaction, and then the copy is renamed over the plaintext.
// A crash between the commit and the rename leaves a ".seal" file that
// reconcile renames into place on the next open (finishSeal), so a row
// never points at a blob of the other kind for longer than a restart.
func (s *Store) sealLegacy(ctx context.Context) error {
	after := ""
	sealed := 0
	for {
		var ids []string
		rows, err := s.db.QueryContext(ctx, `SELECT id FROM files WHERE sealed = 0 AND id > ? ORDER BY id LIMIT 100`, after)
		if err != nil {
			return fmt.Errorf("seal stored files: %w", err)
		}
		for rows.Next() {
			var id string
			if err := rows.Scan(&id); err != nil {
				rows.Close()
				return fmt.Errorf("seal stored files: %w", err)
			}
			ids = append(ids, id)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return fmt.Errorf("seal stored files: %w", err)
		}
		if len(ids) == 0 {
			break
		}
		for _, id := range ids {
			if err := s.sealOne(ctx, id); err != nil {
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

func (s *Store) sealOne(ctx context.Context, id string) error {
	in, err := os.Open(s.blobPath(id))
	if errors.Is(err, os.ErrNotExist) {
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
	tmp := s.blobPath(id) + sealSuffix
	out, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	sw, err := dk.NewWriter(out, blobField)
	if err == nil {
		_, err = io.Copy(sw, in)
	}
	if err == nil {
		err = sw.Close()
	}
	if err == nil {
		err = out.Sync()
	}
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(tmp)
		return err
	}
	if err := s.markSealed(ctx, id, wrapped); err != nil {
		os.Remove(tmp)
		return err
	}
	return s.finishSeal(ctx, id)
}

// markSealed stores id's data key and marks its row sealed.
func (s *Store) markSealed(ctx context.Context, id string, wrapped []byte) error {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, `DELETE FROM data_keys WHERE object_id = ?`, id); err != nil {
		return err
	}
	kek, err := envelope.WrappedKEKID(wrapped)
	if err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO data_keys (object_id, kek_id, wrapped) VALUES (?, ?, ?)`, id, kek, wrapped); err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, `UPDATE files SET sealed = 1 WHERE id = ?`, id); err != nil {
		return err
	}
	return tx.Commit()
}

// finishSeal renames id's sealed copy over its blob when the row says it
// is sealed, and removes the copy otherwise (the crash came before the
// commit, or the file is gone).
func (s *Store) finishSeal(ctx context.Context, id string) error {
	tmp := s.blobPath(id) + sealSuffix
	var sealed bool
	err := s.db.QueryRowContext(ctx, `SELECT sealed FROM files WHERE id = ?`, id).Scan(&sealed)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return err
	}
	if err != nil || !sealed {
		if err := os.Remove(tmp); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
		return nil
	}
	if err := os.Rename(tmp, s.blobPath(id)); err != nil {
		return err
	}
	return syncDir(s.blobDir)
}

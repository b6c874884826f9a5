package lakecluster.delta;

import io.delta.storage.HadoopFileSystemLogStore;
import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.nio.channels.FileChannel;
import java.nio.charset.StandardCharsets;
import java.nio.file.FileAlreadyExistsException;
import java.nio.file.Files;
import java.nio.file.Paths;
import java.nio.file.StandardCopyOption;
import java.nio.file.StandardOpenOption;
import java.util.Iterator;
import java.util.UUID;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FSDataOutputStream;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.Path;

/**
 * A Delta LogStore whose "create version N" is one atomic create-if-absent on the storage itself,
 * so commits from several processes (the stream, compactors, any other Delta writer using it) can
 * never overwrite each other.
 *
 * Delta's own stores check existence first and then write (S3SingleDriverLogStore) or rename over
 * the target (HDFSLogStore on a local disk): safe inside one JVM only. Here:
 * <ul>
 *   <li>local disk: the commit is written to a temporary file and hard-linked to its name;
 *       link(2) fails if the name exists, and readers never see a partial file;</li>
 *   <li>object stores (S3A): one PUT with {@code If-None-Match: *} (Hadoop's conditional create);
 *       the store answers 412 when the version exists.</li>
 * </ul>
 * Either way an existing version surfaces as {@link FileAlreadyExistsException}, which Delta
 * treats as a lost race: it re-reads the log and retries on the next version. On a local disk
 * {@code _last_checkpoint} is replaced by a rename and checkpoints are written under a temporary
 * name first ({@link #isPartialWriteVisible}): no reader ever opens a file half written.
 */
public class ConditionalCreateLogStore extends HadoopFileSystemLogStore {
    private static final String CONDITIONAL_CREATE = "fs.option.create.conditional.overwrite";
    private static final java.util.Set<String> OBJECT_STORES =
            java.util.Set.of("s3a", "s3", "s3n", "gs", "abfs", "abfss", "wasb", "wasbs", "oss", "cos", "cosn");

    public ConditionalCreateLogStore(Configuration hadoopConf) {
        super(hadoopConf);
    }

    @Override
    public void write(Path path, Iterator<String> actions, Boolean overwrite, Configuration hadoopConf)
            throws IOException {
        FileSystem fs = path.getFileSystem(hadoopConf);
        byte[] body = join(actions);
        if (overwrite) {  // _last_checkpoint: replaced whole, never seen half written
            if ("file".equals(fs.getScheme())) {
                replaceLocal(fs.makeQualified(path), body);
            } else {
                try (FSDataOutputStream out = fs.create(path, true)) {  // an object appears whole
                    out.write(body);
                }
            }
            return;
        }
        if ("file".equals(fs.getScheme())) {
            writeLocal(fs.makeQualified(path), body);
        } else {
            writeConditional(fs, path, body);
        }
    }

    private static byte[] join(Iterator<String> actions) throws IOException {
        ByteArrayOutputStream buffer = new ByteArrayOutputStream();
        while (actions.hasNext()) {
            buffer.write((actions.next() + "\n").getBytes(StandardCharsets.UTF_8));
        }
        return buffer.toByteArray();
    }

    private static void writeLocal(Path qualified, byte[] body) throws IOException {
        java.nio.file.Path target = Paths.get(qualified.toUri());
        java.nio.file.Path temp = writeBeside(target, body);
        try {
            try {
                Files.createLink(target, temp);
            } catch (FileAlreadyExistsException e) {
                throw new FileAlreadyExistsException(qualified.toString());
            }
        } finally {
            Files.deleteIfExists(temp);
        }
    }

    private static void replaceLocal(Path qualified, byte[] body) throws IOException {
        java.nio.file.Path target = Paths.get(qualified.toUri());
        java.nio.file.Path temp = writeBeside(target, body);
        try {
            Files.move(temp, target, StandardCopyOption.ATOMIC_MOVE, StandardCopyOption.REPLACE_EXISTING);
        } finally {
            Files.deleteIfExists(temp);
        }
    }

    /** {@code body} in a new hidden file beside {@code target}, flushed to the disk; returns its path. */
    private static java.nio.file.Path writeBeside(java.nio.file.Path target, byte[] body) throws IOException {
        java.nio.file.Path temp = target.resolveSibling("." + target.getFileName() + "." + UUID.randomUUID() + ".tmp");
        try (FileChannel channel = FileChannel.open(temp, StandardOpenOption.CREATE_NEW, StandardOpenOption.WRITE)) {
            channel.write(java.nio.ByteBuffer.wrap(body));
            channel.force(true);
        } catch (IOException e) {
            Files.deleteIfExists(temp);
            throw e;
        }
        return temp;
    }

    private static void writeConditional(FileSystem fs, Path path, byte[] body) throws IOException {
        try (FSDataOutputStream out =
                (FSDataOutputStream) fs.createFile(path).overwrite(true).must(CONDITIONAL_CREATE, true).build()) {
            out.write(body);
        } catch (IOException e) {
            if (isAlreadyThere(e)) {
                throw new FileAlreadyExistsException(path.toString());
            }
            throw e;
        }
    }

    /** A 412 from the store (or Hadoop's own FileAlreadyExistsException) anywhere in the causes. */
    private static boolean isAlreadyThere(Throwable e) {
        for (Throwable t = e; t != null; t = t.getCause()) {
            String name = t.getClass().getName();
            String message = String.valueOf(t.getMessage());
            if (name.endsWith("FileAlreadyExistsException") || name.endsWith("RemoteFileChangedException")
                    || message.contains("412") || message.contains("PreconditionFailed")
                    || message.contains("Precondition Failed")) {
                return true;
            }
        }
        return false;
    }

    /**
     * Whether a reader can see a file while it is written: on a file system (local disk, a mount,
     * HDFS) yes, so Delta writes its checkpoints to a temporary file and renames it; an object
     * store shows an object only once it is whole, and its rename is a copy.
     */
    @Override
    public Boolean isPartialWriteVisible(Path path, Configuration hadoopConf) {
        String scheme;
        try {
            scheme = path.getFileSystem(hadoopConf).getScheme();
        } catch (IOException e) {
            return true;
        }
        return !OBJECT_STORES.contains(scheme);
    }
}

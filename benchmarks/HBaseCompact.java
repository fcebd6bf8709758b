// Flush or major-compact HBase tables, for benchmarks/index_cost.py (Thrift1 can request a
// compaction but neither flush nor tell when a compaction is done; the Java Admin API can).
//
//   java -cp "$RUN/conf:<HBase classpath>" benchmarks/HBaseCompact.java flush|compact TABLE...
//
// flush: write every memstore of the tables to store files (returns when done).
// compact: request a major compaction, wait until no compaction runs, then disable and enable
// each table: closing a region archives the files the compaction replaced (otherwise they stay
// in the store directory until a chore runs, every 2 minutes).
// Exit 0 when done; an exception (and exit 1) otherwise; 2 for bad arguments.

import java.util.ArrayList;
import java.util.List;

import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.hbase.HBaseConfiguration;
import org.apache.hadoop.hbase.TableName;
import org.apache.hadoop.hbase.client.Admin;
import org.apache.hadoop.hbase.client.CompactionState;
import org.apache.hadoop.hbase.client.Connection;
import org.apache.hadoop.hbase.client.ConnectionFactory;

public class HBaseCompact {
    /** Consecutive polls a second apart that must see no compaction: a queued one has not started yet. */
    private static final int QUIET_POLLS = 3;

    public static void main(String[] args) throws Exception {
        if (args.length < 1 || !(args[0].equals("flush") || args[0].equals("compact"))) {
            System.err.println("usage: HBaseCompact flush|compact TABLE...");
            System.exit(2);
        }
        Configuration conf = HBaseConfiguration.create();  // hbase-site.xml from the classpath
        List<TableName> tables = new ArrayList<>();
        for (int i = 1; i < args.length; i++) {
            tables.add(TableName.valueOf(args[i]));
        }
        try (Connection connection = ConnectionFactory.createConnection(conf); Admin admin = connection.getAdmin()) {
            if (args[0].equals("flush")) {
                for (TableName table : tables) {
                    admin.flush(table);
                }
                return;
            }
            for (TableName table : tables) {
                admin.majorCompact(table);
            }
            int quiet = 0;
            while (quiet < QUIET_POLLS) {
                Thread.sleep(1000);
                boolean busy = false;
                for (TableName table : tables) {
                    busy |= admin.getCompactionState(table) != CompactionState.NONE;
                }
                quiet = busy ? 0 : quiet + 1;
            }
            for (TableName table : tables) {
                admin.disableTable(table);
                admin.enableTable(table);
            }
        }
    }
}

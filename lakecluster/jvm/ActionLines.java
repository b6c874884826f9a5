package lakecluster.delta;

import java.util.ArrayList;
import java.util.List;
import org.apache.spark.sql.delta.actions.Action;
import org.apache.spark.sql.delta.actions.Action$;

/**
 * Delta actions parsed from JSON lines in one call: a commit of thousands of actions costs one
 * py4j round trip instead of one per action.
 */
public final class ActionLines {
    private ActionLines() {}

    public static List<Action> parse(String lines) {
        List<Action> out = new ArrayList<>();
        for (String line : lines.split("\n")) {
            if (!line.isEmpty()) {
                out.add(Action$.MODULE$.fromJson(line));
            }
        }
        return out;
    }
}
